"""SCM's controller for retrieval (`[retrieval] selective`): retrieved code is shown only where the repository
holds code more similar to the query than the file above it."""

from __future__ import annotations

from test_pipeline import HOLE, LIB, ScriptedBackend
from test_retrieval import FakeIndex, small_config

from repocomp.backends.model_defaults import resolve_config
from repocomp.context.retrieval_decision import decide
from repocomp.pipeline import Completer, CompletionOptions

# the file above the cursor repeats the shape being typed, with its own names
REPEATS = "\n".join([
    "class Items:",  # 0
    "    def load_items(self, path):",  # 1
    "        with open(path) as fh:",  # 2
    "            data = fh.read()",  # 3
    "        return parse_items(data)",  # 4
    "",  # 5
    "class Others:",  # 6
    "    def load_items(self, path):",  # 7
    "        with open(path) as fh:",  # 8
    "            data = fh.read()",  # 9
    "        return ",  # 10 (cursor after 'return ')
])
def test_the_decision_compares_the_best_windows_by_jaccard_similarity() -> None:
    query = "a = f(x)\nb = g(y)"  # 9 distinct tokens: a = f ( x ) b g y
    above = ["a = f(x)", "c = h(z)", "b = g(q)", "unrelated = 1"]  # windows of 2 lines
    # the file's best window, lines 0-1 (a = f ( x ) c h z): 6 shared of 12; lines 1-2: 5 of 13; lines 2-3: 5 of 12
    d = decide(query, above, ["a = f(x)\nb = g(y)\nz = 0"], window=2)  # the fragment adds z, 0: 9 of 11
    assert (d.in_file, d.repository, d.retrieve) == (0.5, round(9 / 11, 4), True)
    assert not decide(query, above, [], window=2).retrieve  # nothing retrieved: nothing to show
    assert not decide(query, ["a = f(x)", "b = g(y)"], ["a = f(x)"], window=2).retrieve  # the file matches fully


def _completer(files: dict[str, str]) -> Completer:
    cfg = small_config(window=4, stride=2, iterations=1, selective=True)
    return Completer(FakeIndex(files, cfg), resolve_config(cfg), ScriptedBackend(["x"]))


def test_no_retrieved_code_where_the_file_above_explains_the_line() -> None:
    comp = _completer({"lib.py": LIB, "hole.py": REPEATS})
    res = comp.complete("hole.py", REPEATS, 10, len("        return "), CompletionOptions(trace=True))
    assert res.retrieval is not None and not res.retrieval.retrieve
    assert res.retrieval.in_file >= res.retrieval.repository > 0
    assert not [b for b in res.context if b.kind == "similar"] and "parse_config" not in res.prompt


def test_retrieved_code_where_only_the_repository_has_it() -> None:
    comp = _completer({"lib.py": LIB, "hole.py": HOLE})  # only lib.py has code like the lines above the cursor
    res = comp.complete("hole.py", HOLE, 5, len("    cfg = "), CompletionOptions(trace=True))
    assert res.retrieval is not None and res.retrieval.retrieve
    assert res.retrieval.repository > res.retrieval.in_file
    assert "parse_config(data)" in res.prompt


def test_off_by_default_the_prompt_always_shows_retrieved_code() -> None:
    cfg = small_config(window=4, stride=2, iterations=1)
    comp = Completer(FakeIndex({"lib.py": LIB, "hole.py": REPEATS}, cfg), resolve_config(cfg), ScriptedBackend(["x"]))
    res = comp.complete("hole.py", REPEATS, 10, len("        return "), CompletionOptions(trace=True))
    assert res.retrieval is None and "parse_config" in res.prompt
