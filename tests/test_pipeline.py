"""Completer: modes, the iterative RepoCoder loop (the draft feeds round 2), shifts, buffer sync, bad input."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from test_retrieval import FakeIndex, small_config

from repocomp.backends import FallbackBackend, Generation, GenerationRequest
from repocomp.backends.extractive import ExtractiveBackend
from repocomp.backends.model_defaults import resolve_config
from repocomp.context.retrieval import next_query
from repocomp.errors import RepocompError
from repocomp.pipeline import Completer, CompletionOptions, CompletionResult


@dataclass
class ScriptedBackend:
    """Answers round r with drafts[r-1] after delays[r-1] seconds (none by default), cut by the time limit in the
    rounds of `cut`; records every request."""

    drafts: list[str]
    name: str = "scripted"
    requests: list[GenerationRequest] = field(default_factory=list)
    cut: frozenset[int] = frozenset()
    delays: tuple[float, ...] = ()

    async def agenerate(self, request: GenerationRequest) -> Generation:
        self.requests.append(request)
        r = len(self.requests)
        if r <= len(self.delays):
            await asyncio.sleep(self.delays[r - 1])
        draft = self.drafts[min(r, len(self.drafts)) - 1]
        return Generation(text=draft, backend=self.name, at_time_limit=r in self.cut)

    async def aclose(self) -> None:
        pass


LIB = "\n".join([
    "def load_config(path):",  # 0
    "    with open(path) as fh:",  # 1
    "        data = fh.read()",  # 2
    "    return parse_config(data)",  # 3
    "",  # 4
    "def parse_config(text):",  # 5
    "    items = text.split()",  # 6
    "    return dict(items)",  # 7
])
HOLE = "\n".join([
    "import lib",  # 0
    "",  # 1
    "def main(path):",  # 2
    "    with open(path) as fh:",  # 3
    "        data = fh.read()",  # 4
    "    cfg = ",  # 5 (cursor after 'cfg = ')
    "    print(cfg)",  # 6
])


def make(drafts: list[str] | None = None, **retrieval: object) -> tuple[FakeIndex, Completer, ScriptedBackend]:
    cfg = small_config(window=4, stride=2, **retrieval)
    idx = FakeIndex({"lib.py": LIB, "hole.py": HOLE}, cfg)
    backend = ScriptedBackend(drafts or ["parse_config(data)\nreturn cfg", "parse_config(data)"])
    return idx, Completer(idx, resolve_config(cfg), backend), backend


def test_next_query_rule() -> None:
    before = [f"l{i}" for i in range(5)]
    assert next_query(before, "", "\n\nd1\n  \nd2", 2) == "l3\nl4\nd1\nd2"
    # a partly typed line is completed by the draft's first line and counts as one of the `stride` lines
    assert next_query(before, "x = ", "f(1)\nd2", 2) == "l4\nx = f(1)\nd2"
    many = "\n".join(f"d{i}" for i in range(15))
    assert next_query(before, "", many, 2).split("\n") == ["l3", "l4"] + [f"d{i}" for i in range(10)]


def test_repocoder_two_rounds_round2_query_uses_draft() -> None:
    idx, comp, backend = make(iterations=2, alpha=0.0)
    res = comp.complete("hole.py", HOLE, 5, len("    cfg = "), CompletionOptions(trace=True))
    assert len(res.rounds) == 2 and len(backend.requests) == 2
    # round 1: last `window` (4) lines before the cursor, the partial line included
    assert res.rounds[0].query == "def main(path):\n    with open(path) as fh:\n        data = fh.read()\n    cfg = "
    # round 2: last `stride` (2) lines, the partial line completed by the draft, then the draft's next lines
    assert res.rounds[1].query == "        data = fh.read()\n    cfg = parse_config(data)\nreturn cfg"
    assert res.rounds[0].draft == "parse_config(data)\nreturn cfg"
    assert "parse_config(data)" in res.rounds[1].query
    assert res.backend == "scripted"
    assert res.text.startswith("parse_config(data)")
    assert [r.at_time_limit for r in res.rounds] == [False, False]


def test_every_round_carries_the_documents_cache_key() -> None:
    """The key names the document whose prompts a backend may reuse the prefix of; none unless given."""
    _, comp, backend = make(iterations=2, alpha=0.0)
    comp.complete("hole.py", HOLE, 5, len("    cfg = "),
                  CompletionOptions(cache_key="folder\0file:///hole.py", trace=True))
    comp.complete("hole.py", HOLE, 5, len("    cfg = "), CompletionOptions(trace=True))
    assert [r.cache_key for r in backend.requests] == ["folder\0file:///hole.py"] * 2 + [None, None]


def _late(delays: tuple[float, ...], fallback: bool, col: int = len("    cfg = "), deadline_s: float = 0.5,
          ) -> tuple[CompletionResult, float]:
    """(the result, its seconds) of a two-round completion at HOLE's line 5, `col`, whose rounds answer after
    `delays`, by one deadline `deadline_s` from now, with or without the extractive fallback."""
    idx, _, backend = make(iterations=2, alpha=0.0)
    backend.delays = delays
    primary = FallbackBackend(backend, ExtractiveBackend()) if fallback else backend
    comp = Completer(idx, resolve_config(small_config(window=4, stride=2, iterations=2, alpha=0.0)), primary)
    t0 = time.monotonic()
    res = comp.complete("hole.py", HOLE, 5, col, CompletionOptions(trace=True, deadline=time.monotonic() + deadline_s))
    return res, time.monotonic() - t0


def test_a_first_round_past_the_deadline_is_answered_by_the_fallback_by_then() -> None:
    res, took = _late((30.0,), fallback=True, col=4)  # at the line's indentation, after `data = fh.read()`
    assert took < 0.5 + 0.4  # the deadline, not the backend's 30 s (generous bound for a busy machine)
    assert res.fell_back and res.cut_by_time and res.backend == "extractive"
    assert res.text == "return parse_config(data)"  # lib.py's line after the same one, which retrieval found
    assert "round 1 of 2 got no answer within the completion's 0.5s deadline; extractive answered" in res.error
    # without a fallback the answer is empty, said the same way
    res, took = _late((30.0,), fallback=False)
    assert took < 0.5 + 0.4 and res.text == "" and res.cut_by_time and not res.fell_back
    assert "round 1 of 2 got no answer" in res.error


def test_a_later_round_past_the_deadline_keeps_the_draft_a_model_wrote() -> None:
    """Round 1 answers in time, round 2 does not: round 1's draft is the answer, not the fallback's copy."""
    res, took = _late((0.0, 30.0), fallback=True)
    assert took < 0.5 + 0.4
    assert not res.fell_back and res.backend == "scripted" and len(res.rounds) == 1
    assert res.text == "parse_config(data)" and "round 1's draft kept" in res.error


def test_rounds_say_which_draft_the_time_limit_cut() -> None:
    _, comp, backend = make(iterations=2, alpha=0.0)
    backend.cut = frozenset({1})
    res = comp.complete("hole.py", HOLE, 5, len("    cfg = "), CompletionOptions(trace=True))
    assert [r.at_time_limit for r in res.rounds] == [True, False]  # what `bench complete` counts
    # the round-2 prompt is what the backend saw last, without the space after `cfg =` (the model writes it);
    # blocks in prompt order, best last
    assert backend.requests[-1].prompt == res.prompt[:-1] and res.prompt.endswith("cfg = ")
    assert res.prompt.endswith("def main(path):\n    with open(path) as fh:\n        data = fh.read()\n    cfg = ")
    assert res.context and res.context[-1].s_rel == max(b.s_rel for b in res.context)
    assert {"retrieve_1", "prompt_1", "generate_1", "retrieve_2", "prompt_2", "total"} <= set(res.timings_ms)


def test_a_line_cut_by_the_time_limit_never_ends_inside_an_identifier() -> None:
    """The time limit stops a generation wherever it is: a half-written name (`parse_con`) is not offered."""
    _, comp, backend = make(["parse_config(data).get_val"], iterations=1, alpha=0.0)
    backend.cut = frozenset({1})
    res = comp.complete("hole.py", HOLE, 5, len("    cfg = "), CompletionOptions(trace=True))
    assert res.text == "parse_config(data)." and res.cut_by_time
    # the same text not cut by the limit is the model's own: kept whole
    _, comp, backend = make(["parse_config(data).get_val"], iterations=1, alpha=0.0)
    res = comp.complete("hole.py", HOLE, 5, len("    cfg = "), CompletionOptions(trace=True))
    assert res.text == "parse_config(data).get_val" and not res.cut_by_time
    # the token cap stops a run-on line the same way (the scripted backend is a model: its drafts are counted)
    _, comp, backend = make(["parse_config(data).get_value_of_the_key_named"], iterations=1, alpha=0.0)
    comp.config = comp.config.replace("backend", max_new_tokens=8)  # the draft: 6 tokens by the estimate
    assert comp.complete("hole.py", HOLE, 5, len("    cfg = "),
                         CompletionOptions(trace=True)).text == "parse_config(data)."
    # a cut after the line was finished changed nothing: kept whole
    _, comp, backend = make(["parse_config(data)\n    pri"], iterations=1, alpha=0.0)
    backend.cut = frozenset({1})
    assert comp.complete("hole.py", HOLE, 5, len("    cfg = "),
                         CompletionOptions(trace=True)).text == "parse_config(data)"


def test_space_typed_before_the_cursor_is_left_to_the_model_and_not_doubled() -> None:
    # A BPE model continues `cfg =` with the token ` parse_config`; the answer must not repeat the typed space.
    _, comp, backend = make([" parse_config(data)\n"], iterations=1)
    res = comp.complete("hole.py", HOLE, 5, len("    cfg = "), CompletionOptions(mode="vanilla", trace=True))
    assert backend.requests[0].prompt.endswith("    cfg =") and res.text == "parse_config(data)"
    # pure indentation stays in the prompt: there the next token starts the code itself
    _, comp, backend = make(["log(cfg)\n"], iterations=1)
    res = comp.complete("hole.py", HOLE, 6, len("    "), CompletionOptions(mode="vanilla", trace=True))
    assert backend.requests[0].prompt.endswith("\n    ") and res.text == "log(cfg)"


def test_first_round_blocks_show_what_follows_the_match_and_hole_file_is_excluded() -> None:
    idx, comp, backend = make(iterations=1, alpha=0.0)
    res = comp.complete("hole.py", HOLE, 5, len("    cfg = "), CompletionOptions(mode="vanilla", trace=True))
    top = res.rounds[0].blocks[0]
    assert top.path == "lib.py"
    # the best window is lib.py [0,4) (it shares 'with open(path) as fh' and 'data = fh.read()'); shifted by
    # stride 2 it shows [2,6): the lines after the match, which hold the answer's `return parse_config(data)`
    assert (top.start_line, top.end_line) == (2, 6)
    assert top.text == "\n".join(LIB.split("\n")[2:6])
    assert "return parse_config(data)" in backend.requests[0].candidates[0]
    assert all(b.path != "hole.py" for r in res.rounds for b in r.blocks)  # leak rule, prompt starts at line 0


def test_later_rounds_and_oracle_are_not_shifted() -> None:
    idx, comp, _ = make(iterations=2, alpha=0.0)
    res = comp.complete("hole.py", HOLE, 5, len("    cfg = "), CompletionOptions(trace=True))
    for b in res.rounds[1].blocks:
        frag = idx.fragments[b.fragment_id]
        assert frag is not None and b.text == frag.text
    oracle = comp.complete("hole.py", HOLE, 5, 0,
                           CompletionOptions(mode="oracle", oracle_text="def parse_config(text):", trace=True))
    assert oracle.rounds[0].query == "def parse_config(text):" and len(oracle.rounds) == 1
    top = oracle.rounds[0].blocks[0]
    assert "def parse_config(text):" in top.text
    assert top.text == idx.fragments[top.fragment_id].text  # type: ignore[union-attr]
    assert (top.start_line, top.end_line) == (2, 6)  # the matched window itself, no shift


def test_infile_mode_and_retrieval_only() -> None:
    idx, comp, backend = make()
    res = comp.complete("hole.py", HOLE, 5, len("    cfg = "), CompletionOptions(mode="infile", trace=True))
    assert res.prompt == "\n".join(HOLE.split("\n")[:5]) + "\n    cfg = " and res.context == []
    no_llm = Completer(idx, comp.config, backend=None)
    r = no_llm.complete("hole.py", HOLE, 5, len("    cfg = "), CompletionOptions(trace=True))
    assert r.text == "" and r.backend == "none" and r.context
    bare = Completer(None, comp.config, backend=None).complete("x.py", "a = 1\nb = ", 1, 4,
                                                               CompletionOptions(trace=True))
    assert bare.prompt == "a = 1\nb = "


def test_context_start_line_bounds_the_query() -> None:
    idx, comp, _ = make(iterations=1)
    res = comp.complete("hole.py", HOLE, 5, 0, CompletionOptions(context_start_line=4, trace=True))
    assert res.rounds[0].query == "        data = fh.read()"
    assert not res.prompt.startswith("import lib")


def test_live_buffer_updates_index_only_when_different() -> None:
    idx, comp, _ = make(iterations=1)
    comp.complete("hole.py", HOLE, 5, 0, CompletionOptions(trace=True))
    assert idx.updates == []
    edited = HOLE.replace("import lib", "import lib, os")
    comp.complete("hole.py", edited, 5, 0, CompletionOptions(trace=True))
    assert idx.updates == ["hole.py"]
    assert idx.file_lines("hole.py") == edited.split("\n")


def test_bad_input_raises_repocomp_error() -> None:
    idx, comp, _ = make()
    with pytest.raises(RepocompError, match="line 99"):
        comp.complete("hole.py", HOLE, 98, 0, CompletionOptions(trace=True))
    with pytest.raises(RepocompError, match="column"):
        comp.complete("hole.py", HOLE, 0, 500, CompletionOptions(trace=True))
    with pytest.raises(RepocompError, match="inside"):
        comp.complete("../outside.py", HOLE, 0, 0, CompletionOptions(trace=True))
    with pytest.raises(RepocompError, match="mode"):
        comp.complete("hole.py", HOLE, 0, 0, CompletionOptions(mode="magic", trace=True))


def test_explain_fills_edge_types() -> None:
    idx, comp, _ = make(iterations=1)
    lib0 = next(f.id for f in idx.fragments if f and f.locations[0].path == "lib.py")
    cursor_frag = comp.retriever.covering("hole.py", 4)  # type: ignore[union-attr]  # col 0: the line above
    assert cursor_frag is not None
    idx._rel_pairs = {(lib0, cursor_frag): 0.5}
    idx._rebuild_w()
    res = comp.complete("hole.py", HOLE, 5, 0, CompletionOptions(explain=True, trace=True))
    by_id = {b.fragment_id: b for b in res.rounds[0].blocks}
    assert by_id[lib0].relations == ["call"]


def test_with_real_index(tmp_path: Path) -> None:
    index_mod = pytest.importorskip("repocomp.index")
    (tmp_path / "lib.py").write_text(LIB + "\n")
    (tmp_path / "hole.py").write_text(HOLE + "\n")
    cfg = small_config(window=4, stride=2, iterations=2)
    cfg = cfg.replace("index", dir=str(tmp_path / ".idx"))
    idx = index_mod.Index.build(tmp_path, cfg)
    backend = ScriptedBackend(["parse_config(data)", "parse_config(data)"])
    comp = Completer(idx, resolve_config(cfg), backend)
    res = comp.complete("hole.py", HOLE + "\n", 5, len("    cfg = "), CompletionOptions(explain=True, trace=True))
    assert res.rounds[0].blocks and res.rounds[0].blocks[0].path == "lib.py"
    assert all(b.path != "hole.py" for r in res.rounds for b in r.blocks)
    assert "parse_config(data)" in res.rounds[1].query
    # a live edit of the buffer is indexed before retrieval
    edited = HOLE.replace("import lib", "import lib  # edited") + "\n"
    comp.complete("hole.py", edited, 5, 0, CompletionOptions(trace=True))
    assert idx.file_lines("hole.py")[0] == "import lib  # edited"  # type: ignore[index]


def _cli(argv: list[str]) -> int:
    import argparse

    from repocomp.cli import complete

    parser = argparse.ArgumentParser()
    complete.register(parser.add_subparsers())
    args = parser.parse_args(argv)
    return int(args.run(args) or 0)


def test_cli_position_parsing_and_root(tmp_path: Path) -> None:
    from repocomp.cli.complete import find_root, parse_position

    assert parse_position("a/b.py:12") == (Path("a/b.py"), 12, None)
    assert parse_position("b.py:3:7") == (Path("b.py"), 3, 7)
    for bad in ("b.py", "b.py:0", "b.py:x"):
        with pytest.raises(RepocompError):
            parse_position(bad)
    (tmp_path / "repo" / "pkg").mkdir(parents=True)
    (tmp_path / "repo" / "repocomp.toml").write_text("")
    assert find_root(tmp_path / "repo" / "pkg") == tmp_path / "repo"
    # a downloaded Go, Rust, TypeScript or Java project has no .git: its manifest marks the root
    for manifest in ("go.mod", "Cargo.toml", "package.json", "pom.xml", "build.gradle"):
        project = tmp_path / manifest.replace(".", "_")
        (project / "src" / "deep").mkdir(parents=True)
        (project / manifest).write_text("")
        assert find_root(project / "src" / "deep") == project


def test_cli_complete_json_and_explain(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    pytest.importorskip("repocomp.index")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "repocomp.toml").write_text("[fragments]\nwindow = 4\nstride = 2\n")
    (repo / "lib.py").write_text(LIB + "\n")
    (repo / "hole.py").write_text(HOLE + "\n")
    assert _cli(["complete", f"{repo / 'hole.py'}:6", "--json", "--backend", "extractive"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["backend"] == "extractive" and len(out["rounds"]) == 2
    assert out["context"][-1]["path"] == "lib.py"
    assert _cli(["complete", f"{repo / 'hole.py'}:6:11", "--explain", "--iterations", "1", "--no-fragrel"]) == 0
    captured = capsys.readouterr()
    assert "== round 1 ==" in captured.out and "== round 2 ==" not in captured.out
    assert "s_ind" in captured.out and "lib.py:" in captured.out
    assert "completed by the extractive backend" in captured.err
    with pytest.raises(RepocompError, match="past the end"):
        _cli(["complete", f"{repo / 'hole.py'}:99"])


def test_the_cli_imports_only_the_named_subcommand_and_all_of_them_for_help() -> None:
    import subprocess
    import sys

    check = ("import sys; from repocomp.cli import build_parser; "
             "p = build_parser(sys.argv[1:]); print(sorted(p._subparsers._group_actions[0].choices), "
             "'lsprotocol' in sys.modules)")
    run = [sys.executable, "-c", check]
    one = subprocess.run([*run, "-v", "complete", "a.py:3"], capture_output=True, text=True, timeout=120, check=True)
    assert one.stdout.split() == ["['complete']", "False"]  # a completion does not load the server's protocol
    every = subprocess.run([*run, "--help-me"], capture_output=True, text=True, timeout=120, check=True)
    assert every.stdout.startswith("['bench', 'complete', 'eval', 'index', 'memory', 'model', 'serve']")


def _scripted_retrieval(comp: Completer, ranked: list[list[str]]) -> None:
    """Each request's round 1 retrieves the files of `ranked[i]`, best first (one whole-file block each)."""
    from repocomp.results import ContextBlock

    calls = iter(ranked)

    def retrieve(req: object, r: int, draft: str, timings: object) -> tuple[str, list[ContextBlock]]:
        names = next(calls)
        return "q", [ContextBlock(i, f"{n}.py", 0, 1, 1.0 - i / 10, 0.0, 1.0 - i / 10, f"{n}_value = {i}")
                     for i, n in enumerate(names)]

    comp._retrieve = retrieve  # type: ignore[method-assign]


def _block_order(prompt: str) -> list[str]:
    """The scripted blocks' files, in prompt order (each block's first path line; the fragment ids are the fake
    index's, whose other locations follow)."""
    lines = prompt.split("\n")
    return [nxt[2:-3] for line, nxt in zip(lines, lines[1:]) if "can be found in" in line]


def test_consecutive_requests_of_a_document_keep_the_previous_block_order() -> None:
    """Two keystrokes apart, retrieval swaps the ranks of two blocks: the document's second prompt lays them as its
    first did (the shared prefix a backend can reuse), the best block still last; the same blocks are shown. Another
    document (cache key) gets RepoCoder's order, best last."""
    _, comp, backend = make(iterations=1, alpha=0.0)
    _scripted_retrieval(comp, [["a", "b", "c", "d"], ["a", "c", "b", "d"], ["a", "c", "b", "d"],
                               ["a", "c", "b", "d"]])
    col = len("    cfg = ")
    first = comp.complete("hole.py", HOLE, 5, col, CompletionOptions(cache_key="doc1", trace=True))
    assert _block_order(first.prompt) == ["d", "c", "b", "a"]  # best (a) last
    second = comp.complete("hole.py", HOLE, 6, 4, CompletionOptions(cache_key="doc1", trace=True))  # the next line
    assert _block_order(second.prompt) == ["d", "c", "b", "a"]  # b and c swapped ranks; the order stays
    assert second.prompt == backend.requests[-1].prompt  # what the backend got (an indentation is kept whole)
    assert [b.path for b in second.context] == ["d.py", "c.py", "b.py", "a.py"]  # context follows the prompt
    other = comp.complete("hole.py", HOLE, 6, 4, CompletionOptions(cache_key="doc2", trace=True))
    assert _block_order(other.prompt) == ["d", "b", "c", "a"]  # plain rank order
    plain = comp.complete("hole.py", HOLE, 5, col,
                          CompletionOptions(trace=True))  # no key (CLI, evaluation): never reordered
    assert _block_order(plain.prompt) == ["d", "b", "c", "a"]
    assert sorted(second.prompt) == sorted(other.prompt)  # the same characters: only the order differs


def test_typing_on_in_a_line_keeps_its_context_and_a_deletion_or_another_line_retrieves_again() -> None:
    """A request after each typed character: the context of the line's first request stands, so the prompt only
    grows at its end (what a backend's prefix cache reuses), also on the next line written ([retrieval] keep_lines);
    a deletion back past where it was made, a request on a line above, or one without a document key (CLI,
    evaluation) retrieves anew."""
    _, comp, backend = make(iterations=1, alpha=0.0)
    _scripted_retrieval(comp, [["a", "b", "c"], ["c", "b", "a"], ["b", "c", "a"], ["a", "c", "b"]])
    col = len("    cfg = ")

    def at(typed: str, line: int = 5, key: str | None = "k") -> CompletionResult:
        text = HOLE.replace("    cfg = ", "    cfg = " + typed)
        return comp.complete("hole.py", text, line, col + len(typed) if line == 5 else 4,
                             CompletionOptions(cache_key=key, trace=True))

    first, typed = at("p"), at("pars")
    assert typed.prompt.startswith(first.prompt) and typed.prompt.endswith("cfg = pars")
    assert _block_order(typed.prompt) == _block_order(first.prompt) == ["c", "b", "a"]  # the first request's
    assert _block_order(at("pa").prompt) == ["c", "b", "a"]  # back two characters: still typed on from `p`
    assert _block_order(at("").prompt)[-1] == "c"  # back past it: retrieved again (c best now)
    assert _block_order(at("p", line=6).prompt)[-1] == "c"  # the next line: written on from there, kept
    assert _block_order(at("p", line=3).prompt)[-1] == "b"  # a line above
    assert _block_order(at("pa", key=None).prompt)[-1] == "a"  # no key
    assert len(backend.requests) == 7


def test_the_best_block_stays_last_and_a_far_cursor_gets_the_plain_order() -> None:
    _, comp, _ = make(iterations=1, alpha=0.0, keep_lines=0)  # each request retrieves
    _scripted_retrieval(comp, [["a", "b", "c"], ["b", "a", "c"], ["b", "a", "c"], ["b", "c", "a"]])
    col = len("    cfg = ")
    # each request a line from the previous one (on the same line, typing on, the line's context stands)
    assert _block_order(comp.complete("hole.py", HOLE, 5, col,
                                      CompletionOptions(cache_key="k", trace=True)).prompt) == ["c", "b", "a"]
    # a new best block (b) goes last even though the previous prompt had it earlier; c keeps its place
    assert _block_order(comp.complete("hole.py", HOLE, 6, 4,
                                      CompletionOptions(cache_key="k", trace=True)).prompt) == ["c", "a", "b"]
    assert _block_order(comp.complete("hole.py", HOLE, 5, col,
                                      CompletionOptions(cache_key="k", trace=True)).prompt) == ["c", "a", "b"]
    # the cursor moved three lines: RepoCoder's order again
    assert _block_order(comp.complete("hole.py", HOLE, 2, 0,
                                      CompletionOptions(cache_key="k", trace=True)).prompt) == ["a", "c", "b"]


def test_paging_pages_in_what_the_draft_uses_and_the_prompt_does_not_define(tmp_path: Path) -> None:
    """MemGPT's model-directed paging ([retrieval] paging): the draft calls a repository function that no section
    of its prompt defines, so its definition is looked up and a second round sees it; a draft whose names the
    prompt defines (or that are not the repository's) costs no extra round."""
    from repocomp.index import Index

    (tmp_path / "lib.py").write_text(LIB + "\n")
    (tmp_path / "util.py").write_text("def normalize_items(raw, strict=False):\n    return sorted(raw)\n")
    hole = "from util import normalize_items\n" + HOLE + "\n"
    (tmp_path / "hole.py").write_text(hole)
    cfg = small_config(window=4, stride=2, iterations=1, top_k=1).replace("retrieval", paging=True)
    idx = Index.build(tmp_path, cfg.replace("index", dir=str(tmp_path / ".idx")))
    col = len("    cfg = ")
    backend = ScriptedBackend(["normalize_items(data)", "normalize_items(data, strict=True)"])
    res = Completer(idx, resolve_config(cfg), backend).complete("hole.py", hole, 6, col,
                                                                CompletionOptions(definitions=False, trace=True))
    assert len(backend.requests) == 2 and [r.paged for r in res.rounds] == [(), ("normalize_items",)]
    assert "def normalize_items" not in backend.requests[0].prompt
    assert "# def normalize_items(raw, strict=False):" in backend.requests[1].prompt
    assert res.text == "normalize_items(data, strict=True)" and res.prompt == backend.requests[1].prompt + " "
    # `main` is defined in view, `dict` is no repository name: one round
    backend = ScriptedBackend(["dict(main(path))"])
    res = Completer(idx, resolve_config(cfg), backend).complete("hole.py", hole, 6, col,
                                                                CompletionOptions(definitions=False, trace=True))
    assert len(backend.requests) == 1 and [r.paged for r in res.rounds] == [()]
    # paging off (the default): one round whatever the draft uses
    backend = ScriptedBackend(["normalize_items(data)"])
    off = cfg.replace("retrieval", paging=False)
    Completer(idx, resolve_config(off), backend).complete("hole.py", hole, 6, col,
                                                          CompletionOptions(definitions=False, trace=True))
    assert len(backend.requests) == 1


def test_draft_names_continue_the_cursor_line() -> None:
    from repocomp.context.paging import defines as _defines
    from repocomp.context.paging import draft_names

    assert draft_names("    x = self.ta", "ble.get(key) if not None else util.load(x)") == [
        ("self", "table", "get"), ("key",), ("util", "load"), ("x",)]
    assert _defines("# def load(path):\n", "load") and _defines("#     LIMIT = 3\n", "LIMIT")
    assert not _defines("x = load(path)\nif load == 2:\n", "load")


@dataclass
class PrefillingBackend(ScriptedBackend):
    """A scripted backend that keeps a prefix cache: records what it was asked to prefill."""

    prefilled: list[str] = field(default_factory=list)

    async def aprefill(self, request: GenerationRequest) -> bool:
        self.prefilled.append(request.prompt)
        return True

    async def aload(self) -> None:
        pass

    @property
    def capabilities(self) -> object:
        return None

    def stats(self) -> dict[str, object]:
        return {}


def test_a_prefetch_lays_the_line_context_and_prefills_the_prompt_a_request_below_then_extends() -> None:
    """The cursor rests at the end of line 5: a prefetch there writes nothing, keeps the context it laid and hands
    its prompt to the backend's prefill; the request on the line opened below shows that context again and its
    prompt extends the prefilled one whole; with no prefix cache (the extractive backend) nothing is prefilled and
    the context is kept all the same."""
    lines = HOLE.split("\n")
    resting = "\n".join([*lines[:5], "    data = data.strip()", *lines[6:]])
    opened = "\n".join([*lines[:5], "    data = data.strip()", "    ", *lines[6:]])  # `o` on line 5
    idx = FakeIndex({"lib.py": LIB, "hole.py": HOLE}, small_config(window=4, stride=2, iterations=1, alpha=0.0))
    for backend in (PrefillingBackend(["parse_config(data)"]), ExtractiveBackend()):
        comp = Completer(idx, resolve_config(idx.config), backend)
        _scripted_retrieval(comp, [["a", "b", "c"], ["c", "b", "a"]])
        ahead = comp.complete("hole.py", resting, 5, len("    data = data.strip()"),
                              CompletionOptions(cache_key="k", trace=True, prefill=True))
        assert ahead.text == "" and ahead.prompt.endswith("    data = data.strip()")
        after = comp.complete("hole.py", opened, 6, 4, CompletionOptions(cache_key="k", trace=True))
        assert _block_order(after.prompt) == _block_order(ahead.prompt) == ["c", "b", "a"]  # the prefetch's context
        assert after.prompt == ahead.prompt + "\n    "
        if isinstance(backend, PrefillingBackend):
            assert backend.prefilled == [ahead.prompt] and len(backend.requests) == 1  # no generation for it
