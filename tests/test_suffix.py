"""Where a fill-in-the-middle prompt reads the code after the cursor (`[prompt] fim_at`, `suffix_lines`): the cases
of each setting (inside a line, an empty line before a closing bracket, an empty line before unrelated code) give
the prompts they should."""

import pytest

from repocomp.prompt.layout import Place, build_prompt
from repocomp.prompt.suffix import continues_below, expected_indent, reads_suffix, suffix_lines
from tests.configs import prompt_config

CALL_OPEN = "def send(client):\n    response = client.post(\n        url,\n"
BLOCK_ABOVE = "def send(client):\n    response = client.post(url)\n"
PLACE = Place("pkg/main.py", 3, repo="shop")


def _fim(prefix: str, suffix: str, **overrides) -> str:
    config = prompt_config(fim="qwen", layout="files", **overrides)
    return build_prompt([], prefix, suffix, config, place=PLACE).text


@pytest.mark.parametrize("prefix, suffix, continues", [
    (CALL_OPEN, "\n    )\n    return response", True),  # an empty line before the bracket the prefix opened
    (BLOCK_ABOVE, "\n    return response\n", False),  # an empty line before unrelated code at the same depth
    (BLOCK_ABOVE, "\n        retry(response)\n", True),  # the code below is deeper: the line opens its block
    ("def f():\n", "\n    return 1\n", False),  # a body's first line: the rest of the body is not its continuation
    (BLOCK_ABOVE, "\n)\n", False),  # a closing bracket that nothing open matches
    ("x = [1, 2]\n", "\n\n\n", False),  # nothing below
    (CALL_OPEN, "   \n    )", True),  # only spaces after the cursor on its line: the next line decides
    ('s = "(" + f(\n', "\n)", True),  # a bracket inside a string is not code
])
def test_lines_below_that_continue_the_cursor_line(prefix, suffix, continues):
    assert continues_below(prefix, suffix) is continues


@pytest.mark.parametrize("fim_at, inline, bracket, unrelated", [
    ("inline", True, False, False), ("continues", True, True, False), ("always", True, True, True)])
def test_where_each_setting_reads_the_suffix(fim_at, inline, bracket, unrelated):
    assert reads_suffix(fim_at, "x = compute(", "a, b)\nprint(x)") is inline  # inside a line
    assert reads_suffix(fim_at, CALL_OPEN, "\n    )\n    return response") is bracket
    assert reads_suffix(fim_at, BLOCK_ABOVE, "\n    return response\n") is unrelated


def test_expected_indent_follows_the_editor():
    assert expected_indent("def f():\n") == 4  # auto-indent after a block opener
    assert expected_indent("def f():\n    x = 1\n") == 4
    assert expected_indent("def f():\n    x = 1\n  ") == 2  # what is typed wins
    assert expected_indent("def f():\n    x = g(") == 4


def test_prompts_at_the_default():
    """Inside a line the prompt is FIM with the suffix; on an empty line before code (a bracket it closes or not)
    it is exactly the prefix-only prompt of `fim = "none"`; with nothing after the cursor the FIM format stays."""
    inside = _fim("x = compute(", "a, b)\nprint(x)")
    assert inside.endswith("<|fim_prefix|>x = compute(<|fim_suffix|>a, b)\nprint(x)<|fim_middle|>")
    for prefix, suffix in ((CALL_OPEN, "\n    )\n    return response"), (BLOCK_ABOVE, "\n    return response\n")):
        plain = build_prompt([], prefix, suffix, prompt_config(fim="none", layout="files"), place=PLACE)
        assert _fim(prefix, suffix) == plain.text and "<|fim_" not in plain.text
        assert build_prompt([], prefix, suffix, prompt_config(fim="qwen", layout="files"), place=PLACE).fim == "none"
    assert _fim(BLOCK_ABOVE, "").endswith("<|fim_suffix|><|fim_middle|>")


def test_prompts_of_the_other_settings():
    bracket = _fim(CALL_OPEN, "\n    )\n    return response", fim_at="continues")
    assert bracket.endswith(f"<|fim_prefix|>{CALL_OPEN}<|fim_suffix|>\n    )\n    return response<|fim_middle|>")
    assert "<|fim_" not in _fim(BLOCK_ABOVE, "\n    return response\n", fim_at="continues")
    always = _fim(BLOCK_ABOVE, "\n    return response\n", fim_at="always")
    assert always.endswith("<|fim_suffix|>\n    return response\n<|fim_middle|>")


def test_suffix_lines_bound_what_is_read():
    suffix = "a)\n" + "".join(f"line{i}\n" for i in range(20))
    assert suffix_lines(suffix, 2) == "a)\nline0\nline1"
    assert suffix_lines(suffix, 0) == suffix
    text = _fim("x = f(", suffix, suffix_lines=2)
    assert "<|fim_suffix|>a)\nline0\nline1<|fim_middle|>" in text


def test_settings_are_checked():
    from repocomp.config.schema import PromptConfig

    with pytest.raises(ValueError, match="fim_at"):
        PromptConfig(fim_at="sometimes").validate()
    with pytest.raises(ValueError, match="suffix_lines"):
        PromptConfig(suffix_lines=-1).validate()
