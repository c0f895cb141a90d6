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


def test_typing_keeps_the_lines_context_until_another_file_changes(tmp_path: Path) -> None:
    (tmp_path / "lib.py").write_text(LIB)
    (tmp_path / "main.py").write_text(MAIN)
    config = resolve_config(Config().replace("retrieval", iterations=1))
    index = Index.build(tmp_path, config)
    comp = Completer(index, config, ScriptedBackend(["load_config(path)"]))
    retrieved: list[int] = []
    retrieve = comp._retrieve

    def counted(*args: object) -> object:
        retrieved.append(1)
        return retrieve(*args)  # type: ignore[arg-type]

    comp._retrieve = counted  # type: ignore[method-assign]

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


def test_keep_lines_shows_the_context_again_on_the_lines_below_with_the_same_first_line(tmp_path: Path) -> None:
    (tmp_path / "lib.py").write_text(LIB)
    (tmp_path / "main.py").write_text(MAIN)
    config = resolve_config(Config().replace("retrieval", iterations=1, keep_lines=2))
    index = Index.build(tmp_path, config)
    comp = Completer(index, config, ScriptedBackend(["load_config(path)"]))
    retrieved: list[int] = []
    retrieve = comp._retrieve

    def counted(*args: object) -> object:
        retrieved.append(1)
        return retrieve(*args)  # type: ignore[arg-type]

    comp._retrieve = counted  # type: ignore[method-assign]
    written = ["    cfg = load_config(path)", "    cfg['debug'] = True", "    return cfg"]

    def ask(on: int) -> str:  # the lines written before line 4 + on, then the cursor at that line's indentation
        text = "".join(f"{t}\n" for t in MAIN.split("\n")[:4] + written[:on]) + "    \n"
        res = comp.complete("main.py", text, 4 + on, 4, CompletionOptions(cache_key="main"))
        return res.prompt

    first = ask(0)
    second = ask(1)
    third = ask(2)
    assert len(retrieved) == 1
    # each prompt is the one before up to its cursor's line plus the line written since
    assert second.startswith(first[:first.rindex("\n") + 1] + written[0] + "\n")
    assert third.startswith(second[:second.rindex("\n") + 1] + written[1] + "\n")
    ask(3)  # a fourth line below: past keep_lines, retrieved again
    assert len(retrieved) == 2

    config = resolve_config(Config().replace("retrieval", iterations=1, keep_lines=0))
    comp = Completer(index, config, ScriptedBackend(["x"]))
    comp._retrieve = counted  # type: ignore[method-assign]
    retrieved.clear()
    ask(0)
    ask(1)
    assert len(retrieved) == 2  # keep_lines = 0: the line itself only
