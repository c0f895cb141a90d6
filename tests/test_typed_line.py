"""A line's context kept while it is typed (`repocomp.context.typed_line`), ended by a change to another file
(`repocomp.index.revisions`), on a real index."""

from __future__ import annotations

from pathlib import Path

from test_pipeline import ScriptedBackend

from repocomp.backends.model_defaults import resolve_config
from repocomp.config.schema import Config
from repocomp.index import Index
from repocomp.index.revisions import Revisions
from repocomp.pipeline import Completer, CompletionOptions


def test_revisions_say_whether_a_file_other_than_one_changed_since() -> None:
    rev = Revisions()
    rev.note(["a.py"])
    at = rev.now
    assert not rev.changed_elsewhere_since(at, "a.py") and not rev.changed_elsewhere_since(at, "b.py")
    rev.note(["a.py"])
    rev.note(["a.py"])  # the buffer synced as it is typed
    assert not rev.changed_elsewhere_since(at, "a.py") and rev.changed_elsewhere_since(at, "b.py")
    rev.note(["b.py"])
    assert rev.changed_elsewhere_since(at, "a.py")
    at = rev.now
    rev.note(["a.py", "c.py"])  # one update of two files
    assert rev.changed_elsewhere_since(at, "a.py")


LIB = ("def load_config(path):\n    return parse_config(open(path).read())\n\n\n"
       "def parse_config(text):\n    return dict(line.split('=') for line in text.splitlines())\n")
MAIN = "import lib\n\n\ndef main(path):\n    cfg = \n"


def _counting(root: Path, **retrieval: object) -> tuple[Index, Completer, list[int]]:
    """An index of lib.py and main.py under `root` and a completer over it whose retrievals are counted (one
    round unless `iterations` is given)."""
    root.mkdir(exist_ok=True)
    (root / "lib.py").write_text(LIB)
    (root / "main.py").write_text(MAIN)
    config = resolve_config(Config().replace("retrieval", **{"iterations": 1} | retrieval))
    index = Index.build(root, config)
    comp = Completer(index, config, ScriptedBackend(["load_config(path)"]))
    retrieved: list[int] = []
    retrieve = comp._retrieve

    def counted(*args: object) -> object:
        retrieved.append(1)
        return retrieve(*args)  # type: ignore[arg-type]

    comp._retrieve = counted  # type: ignore[method-assign]
    return index, comp, retrieved


def test_typing_keeps_the_lines_context_until_another_file_changes(tmp_path: Path) -> None:
    index, comp, retrieved = _counting(tmp_path)

    def ask(typed: str) -> None:
        text = MAIN.replace("    cfg = ", "    cfg = " + typed)
        comp.complete("main.py", text, 4, len("    cfg = " + typed), CompletionOptions(cache_key="main"))

    ask("")
    ask("lo")  # the buffer reaches the index (sync_buffers): a change to this file only
    assert len(retrieved) == 1
    index.update_file("lib.py", LIB + "\n\ndef load_defaults():\n    return {}\n")  # a save of another file
    ask("loa")
    assert len(retrieved) == 2
    ask("load")
    assert len(retrieved) == 2


def test_typing_on_runs_only_the_last_round_with_the_context_it_had(tmp_path: Path) -> None:
    """RepoCoder's rounds before the last only draft its query: while the line is typed on, the last round's
    context stands and only that round is generated again, its prompt the previous one plus what was typed."""
    index, comp, retrieved = _counting(tmp_path, iterations=2)
    backend = comp.backend
    assert isinstance(backend, ScriptedBackend)

    def ask(typed: str) -> str:
        text = MAIN.replace("    cfg = ", "    cfg = " + typed)
        return comp.complete("main.py", text, 4, len("    cfg = " + typed), CompletionOptions(cache_key="main")).prompt

    first = ask("")
    assert (len(retrieved), len(backend.requests)) == (2, 2)
    assert ask("lo") == first + "lo" and (len(retrieved), len(backend.requests)) == (2, 3)
    assert backend.requests[2].prompt.startswith(backend.requests[1].prompt)  # round 2's, grown at its end
    index.update_file("lib.py", LIB + "\n\ndef load_defaults():\n    return {}\n")  # another file changed: anew
    ask("loa")
    assert (len(retrieved), len(backend.requests)) == (4, 5)


WRITTEN = ["    cfg = load_config(path)", "    cfg['debug'] = True", "    return cfg"]


def _ask_below(comp: Completer, on: int) -> str:
    """The prompt at line 4 + `on`, the lines of WRITTEN before it written, the cursor at its indentation."""
    text = "".join(f"{t}\n" for t in MAIN.split("\n")[:4] + WRITTEN[:on]) + "    \n"
    return comp.complete("main.py", text, 4 + on, 4, CompletionOptions(cache_key="main")).prompt


def test_keep_lines_shows_the_context_again_on_the_lines_below_with_the_same_first_line(tmp_path: Path) -> None:
    _, comp, retrieved = _counting(tmp_path / "keep2", keep_lines=2)
    first, second, third = (_ask_below(comp, on) for on in range(3))
    assert len(retrieved) == 1
    # each prompt is the one before up to its cursor's line plus the line written since
    assert second.startswith(first[:first.rindex("\n") + 1] + WRITTEN[0] + "\n")
    assert third.startswith(second[:second.rindex("\n") + 1] + WRITTEN[1] + "\n")
    _ask_below(comp, 3)  # three lines below the first: past keep_lines, retrieved again
    assert len(retrieved) == 2

    _, comp, retrieved = _counting(tmp_path / "keep0", keep_lines=0)
    _ask_below(comp, 0)
    _ask_below(comp, 1)
    assert len(retrieved) == 2  # keep_lines = 0: the line itself only
