"""The model-free extractive backend: continuation copied from the best matching candidate."""

from __future__ import annotations

from repocomp.backends import Backend, Generation, GenerationRequest, make_backend
from repocomp.backends.extractive import ExtractiveBackend, extract_continuation
from repocomp.backends.model_defaults import resolve_config
from repocomp.config.schema import Config

CAND_A = """\
def load(path):
    data = read_json(path, strict=True)
    return Config(**data)
"""

CAND_B = """\
    result = compute_total(items, tax=0.2)
    print(result)
"""


def gen(prefix: str, candidates: tuple[str, ...], max_new_tokens: int = 64, stop: tuple[str, ...] = ()) -> Generation:
    import asyncio

    r = GenerationRequest(prompt="ignored", prefix=prefix, suffix="", candidates=candidates,
                          max_new_tokens=max_new_tokens, stop=stop)
    return asyncio.run(ExtractiveBackend().agenerate(r))


def test_continues_the_current_line_from_a_line_start_match() -> None:
    out = extract_continuation("def main():\n    data = read_json(", (CAND_A,))
    assert out == "path, strict=True)\n    return Config(**data)"


def test_best_candidate_wins() -> None:
    other = "x = 1\n    data = read_json(other_path)\n"
    assert extract_continuation("    data = read_json(", (other, CAND_A)).startswith("other_path)")
    assert extract_continuation("    data = read_json(", (CAND_A, other)).startswith("path, strict=True)")


def test_line_start_match_beats_match_inside_a_line() -> None:
    inside = "y = compute_total(x)\n"
    start = "compute_total(items)\n"
    assert extract_continuation("compute_total(", (inside, start)) == "items)"


def test_match_anywhere_in_a_line_when_no_line_starts_with_it() -> None:
    assert extract_continuation("    total = compute_total(", (CAND_B,)).startswith("items, tax=0.2)")


def test_empty_line_uses_the_line_after_the_previous_line_reindented() -> None:
    # Buffer indentation 8, candidate indentation 4: the proposal moves to the buffer's.
    prefix = "class C:\n    def f(self):\n        data = read_json(path, strict=True)\n        "
    out = extract_continuation(prefix, (CAND_A,))
    assert out == "return Config(**data)"  # the 8 typed spaces are not proposed again
    assert extract_continuation(prefix[: -len("        ")], (CAND_A,)) == "        return Config(**data)"


def test_previous_line_route_must_agree_with_typed_text() -> None:
    prefix = "    data = read_json(path, strict=True)\n    ret"
    assert extract_continuation(prefix, (CAND_A,)) == "urn Config(**data)"
    assert extract_continuation("    data = read_json(path, strict=True)\n    zzz", (CAND_A,)) == ""


def test_nothing_matches_is_empty() -> None:
    assert extract_continuation("unrelated_call(", (CAND_A, CAND_B)) == ""
    assert extract_continuation("", (CAND_A,)) == ""
    assert extract_continuation("x = 1\n", ()) == ""


def test_backend_caps_tokens_and_honours_stops() -> None:
    g = gen("    data = read_json(", (CAND_A,), stop=("\n",))
    assert g == Generation(text="path, strict=True)", backend="extractive", copied=True)
    assert gen("    data = read_json(", (CAND_A,), max_new_tokens=3).text == "path, strict"
    assert gen("nothing here(", (CAND_A,)).text == ""


def test_make_backend_default_is_extractive() -> None:
    # "auto" resolves to the extractive backend where no local model is prepared (as in the tests)
    b = make_backend(resolve_config(Config()).backend)
    assert isinstance(b, Backend) and b.name == "extractive"
