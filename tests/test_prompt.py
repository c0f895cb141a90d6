"""Prompt layout (exact text), token budget, block skipping, max_blocks and FIM formats."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from configs import prompt_config
from hypothesis import given
from hypothesis import strategies as st

from repocomp.config.schema import PromptConfig
from repocomp.errors import RepocompError
from repocomp.prompt.layout import (
    BlockSource,
    DefinitionsSection,
    Place,
    RecentSection,
    _Shown,
    build_prompt,
    estimate_tokens,
    format_fim,
    make_token_counter,
)

BEST = BlockSource(7, ("pkg/util.py",), 10, 12, "def add(a, b):\n    return a + b")
SECOND = BlockSource(3, ("pkg/other.py", "pkg/copy.py"), 0, 1, "x = add(1, 2)")
PREFIX = "from pkg.util import add\n\ny = "

EXPECTED = (
    "# Here are some relevant code fragments from other files of the repo:\n"
    "# --------------------------------------------------\n"
    "# the below code fragment can be found in:\n"
    "# pkg/other.py\n"
    "# pkg/copy.py\n"
    "# --------------------------------------------------\n"
    "# x = add(1, 2)\n"
    "# --------------------------------------------------\n"
    "# the below code fragment can be found in:\n"
    "# pkg/util.py\n"
    "# --------------------------------------------------\n"
    "# def add(a, b):\n"
    "#     return a + b\n"
    "# --------------------------------------------------\n"
    "\n"
    "from pkg.util import add\n"
    "\n"
    "y = "
)


def test_repocoder_layout_exact_text_best_block_nearest_code() -> None:
    p = build_prompt([BEST, SECOND], PREFIX, "", prompt_config())
    assert p.text == EXPECTED
    assert [b.source.fragment_id for b in p.blocks] == [3, 7]  # prompt order: best last
    assert p.context == PREFIX
    assert p.tokens == estimate_tokens(EXPECTED)  # counted piecewise: header + blocks + blank line + context


def test_budget_skips_block_that_does_not_fit_but_keeps_smaller_later_one() -> None:
    big = BlockSource(1, ("big.py",), 0, 50, "\n".join(f"value_{i} = compute({i})" for i in range(50)))
    small = BlockSource(2, ("small.py",), 0, 1, "z = 1")
    cfg = prompt_config(max_tokens=200, context_tokens=40)
    p = build_prompt([big, small], PREFIX, "", cfg)
    assert [b.source.fragment_id for b in p.blocks] == [2]
    assert "big.py" not in p.text and "small.py" in p.text
    assert p.tokens <= cfg.max_tokens


def test_max_blocks_and_no_blocks() -> None:
    srcs = [BlockSource(i, (f"f{i}.py",), 0, 1, f"v{i} = {i}") for i in range(5)]
    p = build_prompt(srcs, PREFIX, "", prompt_config(max_blocks=2))
    assert [b.source.fragment_id for b in p.blocks] == [1, 0]
    bare = build_prompt([], PREFIX, "", prompt_config())
    assert bare.text == PREFIX  # nothing retrieved: the in-file context alone, no header


def test_in_file_context_keeps_last_lines_within_budget() -> None:
    prefix = "\n".join(f"line_{i} = {i}" for i in range(100)) + "\nresult = "
    p = build_prompt([], prefix, "", prompt_config(max_tokens=100, context_tokens=30))
    assert p.text.endswith("line_99 = 99\nresult = ")
    assert "line_0 =" not in p.text
    assert estimate_tokens(p.context) <= 30 + 1


def test_a_layout_kept_lays_a_later_prompt_at_the_line_as_the_earlier_one_only_longer_by_what_was_typed() -> None:
    """Typing at the line pushes the in-file context over its budget: laid afresh its first line moves (and the
    blocks' budget with it), so the prompt changes far from its end; laid with the first prompt's layout, the
    later prompt is the first one plus what was typed (what a model's prefix cache reuses)."""
    prefix = "\n".join(f"line_{i} = {i}" for i in range(100)) + "\nresult = "
    cfg = prompt_config(max_tokens=100, context_tokens=30)
    first = build_prompt([BEST, SECOND], prefix, "", cfg)
    typed = "compute(line_98, line_99) + 1"
    fresh = build_prompt([BEST, SECOND], prefix + typed, "", cfg)
    assert not fresh.text.startswith(first.text)
    assert first.layout is not None
    kept = build_prompt([BEST, SECOND], prefix + typed, "", cfg, layout=first.layout)
    assert kept.text == first.text + typed and kept.layout == first.layout
    # a cursor line cut to its end (minified code) is no layout to keep: its cut moves with every key
    assert build_prompt([], "a = b + c; " * 300, "", cfg).layout is None


def test_fim_formats() -> None:
    assert format_fim("codellama", "a = ", "\nb = 2") == "<PRE> a =  <SUF>\nb = 2 <MID>"
    assert format_fim("starcoder", "a = ", "\nb = 2") == "<fim_prefix>a = <fim_suffix>\nb = 2<fim_middle>"
    p = build_prompt([BEST], "y = ", "\nprint(y)", prompt_config(fim="codellama", fim_at="always"))
    assert p.text.startswith("<PRE> # Here are some relevant code fragments")
    assert p.text.endswith("\ny =  <SUF>\nprint(y) <MID>")
    s = build_prompt([], "y = ", "\nprint(y)", prompt_config(fim="starcoder", fim_at="always"))
    assert s.text == "<fim_prefix>y = <fim_suffix>\nprint(y)<fim_middle>"
    # without FIM the suffix is not part of the prompt
    assert "print(y)" not in build_prompt([], "y = ", "\nprint(y)", prompt_config()).text


def test_model_tokenizer_counts(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, "a": 1, "b": 2, "=": 3}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    json.loads((tmp_path / "tokenizer.json").read_text())
    count = make_token_counter(PromptConfig(tokenizer=str(tmp_path)))
    assert count("a = b") == 3
    assert count("a = b c d") == 5  # unknown words are still one token each
    with pytest.raises(RepocompError):
        make_token_counter(PromptConfig(tokenizer=str(tmp_path / "missing")))


@given(spans=st.lists(st.tuples(st.integers(0, 40), st.integers(1, 12)), max_size=8),
       start=st.integers(0, 40), length=st.integers(0, 30))
def test_uncovered_runs_are_the_lines_no_shown_span_covers(spans: list[tuple[int, int]], start: int,
                                                          length: int) -> None:
    shown = _Shown()
    for s, n in spans:
        shown.add("a.py", s, s + n)
    shown.add("b.py", 0, 100)  # another file's spans change nothing
    end = start + length
    free = {n for n in range(start, end) if not any(s <= n < s + k for s, k in spans)}
    runs = shown.uncovered("a.py", start, end)
    assert {n for s, e in runs for n in range(s, e)} == free
    assert all(s < e for s, e in runs) and all(a[1] < b[0] for a, b in zip(runs, runs[1:]))  # maximal, in order
    assert shown.overlaps("a.py", start, end) == (len(free) < length)


def test_recent_edits_sit_nearest_the_code_within_their_tokens_and_are_not_repeated() -> None:
    from repocomp.prompt.layout import RecentSource

    hunk = RecentSource("hunk", "pkg/util.py", 10, ("def add(a, b):", "    return a + b"))
    thought = RecentSource("thought", "pkg/util.py", -1, ("renamed `plus` to `add` (pkg/util.py)",))
    cfg = prompt_config(max_tokens=400, context_tokens=100)
    prompt = build_prompt([BEST, SECOND], PREFIX, "", cfg, recent=RecentSection([thought, hunk], 200))
    recent = (
        "# Recent edits in this session:\n"
        "# --------------------------------------------------\n"
        "# pkg/util.py (line 11):\n"
        "# def add(a, b):\n"
        "#     return a + b\n"
        "# - renamed `plus` to `add` (pkg/util.py)\n"  # the best entry last, nearest the code
        "# --------------------------------------------------\n"
        "\n"
    )
    assert prompt.text.endswith(recent + PREFIX), prompt.text
    # the hunk's lines are shown: the similar block of the same lines is not repeated
    assert [b.source.fragment_id for b in prompt.blocks] == [3]
    assert prompt.recent == (hunk, thought) and prompt.tokens == estimate_tokens(prompt.text)
    # within the tokens the controller granted: only what fits
    small = build_prompt([], PREFIX, "", cfg, recent=RecentSection([thought, hunk], estimate_tokens(thought.lines[0])))
    assert small.recent == (thought,)
    # a hunk in the cursor's own file, inside the in-file context, is in view already
    here = RecentSource("hunk", "main.py", 0, ("from pkg.util import add",))
    assert build_prompt([], PREFIX, "", cfg, place=Place("main.py", 2), recent=RecentSection([here], 200)).recent == ()


QWEN_EXPECTED = (
    "<|repo_name|>shop\n"
    "<|file_sep|>pkg/other.py\n"
    "x = add(1, 2)\n"
    "<|file_sep|>pkg/util.py\n"
    "def add(a, b):\n"
    "    return a + b\n"
    "<|file_sep|>pkg/main.py\n"
    "<|fim_prefix|>from pkg.util import add\n"
    "\n"
    "y = <|fim_suffix|>\n"
    "print(y)<|fim_middle|>"
)


def test_qwen_repository_layout_with_fill_in_the_middle_exact_text() -> None:
    """Qwen2.5-Coder's repository-level FIM (its examples/Qwen2.5-Coder-repolevel-fim.py): every block a file
    under `<|file_sep|>PATH`, its code as is, the cursor's file last and the FIM part in it."""
    config = prompt_config(fim="qwen", layout="files", fim_at="always")
    p = build_prompt([BEST, SECOND], PREFIX, "\nprint(y)", config, place=Place("pkg/main.py", 9, repo="shop"))
    assert p.text == QWEN_EXPECTED
    # prefix only: the same files, the code before the cursor last
    plain = build_prompt([BEST, SECOND], PREFIX, "\nprint(y)", prompt_config(fim="none", layout="files"),
                         place=Place("pkg/main.py", 9, repo="shop"))
    assert plain.text == QWEN_EXPECTED.split("<|fim_prefix|>")[0] + PREFIX


def test_qwen_layout_shows_definitions_and_session_edits_as_files() -> None:
    from repocomp.prompt.layout import DefinitionSource, RecentSource

    config = prompt_config(fim="qwen", layout="files", max_tokens=2000, context_tokens=500)
    definition = DefinitionSource("add", "pkg/util.py", ((10, "def add(a, b):"), (20, "    return a + b")))
    edit = RecentSource("hunk", "pkg/cart.py", 4, ("total = add(total, price)",))
    p = build_prompt([], PREFIX, "", config, place=Place("pkg/main.py", 9, repo="shop"), definitions=DefinitionsSection([definition], share=0.5), recent=RecentSection([edit], 100))
    assert "<|file_sep|>pkg/util.py\ndef add(a, b):\n    ...\n    return a + b\n" in p.text
    assert "<|file_sep|>pkg/cart.py\n# (line 5):\ntotal = add(total, price)\n" in p.text
    assert "# ----" not in p.text and p.text.startswith("<|repo_name|>shop\n")
    assert p.text.endswith("<|file_sep|>pkg/main.py\n<|fim_prefix|>" + PREFIX + "<|fim_suffix|><|fim_middle|>")


@pytest.mark.local_model
def test_qwen_layout_is_token_exact_with_the_real_tokenizer(local_model) -> None:
    """The format's markers are the model's special tokens, one token each, with the ids its training used."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(local_model.path / "tokenizer.json"))
    ids = tok.encode(QWEN_EXPECTED, add_special_tokens=False).ids
    specials = {151659: "<|fim_prefix|>", 151660: "<|fim_middle|>", 151661: "<|fim_suffix|>",
                151663: "<|repo_name|>", 151664: "<|file_sep|>"}
    assert [i for i in ids if i in specials] == [151663, 151664, 151664, 151664, 151659, 151661, 151660]
    assert tok.decode(ids, skip_special_tokens=False) == QWEN_EXPECTED
