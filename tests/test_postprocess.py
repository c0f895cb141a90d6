"""Post-processing of raw continuations per completion kind, and suffix de-duplication."""

from __future__ import annotations

import pytest

from repocomp.prompt.postprocess import choose_kind, drop_cut_word, is_finished, open_brackets, postprocess


def test_line_cuts_at_end_of_line() -> None:
    assert postprocess("foo(a, b)\nx = 2\n", "line", "y = ", "") == "foo(a, b)"


def test_line_skips_leading_blank_lines_only_on_an_empty_cursor_line() -> None:
    assert postprocess("\n\n    return x\nmore", "line", "def f(x):\n", "") == "    return x"


def test_at_the_end_of_a_complete_line_the_next_statement_is_offered() -> None:
    """The model ends the cursor line right away: the line is complete, so the next one is offered after a line
    break, indented as the model wrote it (the editor got nothing here before)."""
    assert postprocess("\n    return x\nmore", "line", "def f(x):\n    y = foo()", "") == "\n    return x"
    assert postprocess("\n\n    z = h(\n        1)\n    w", "auto", "    y = foo()", "") == "\n    z = h(\n        1)"
    assert postprocess("\n    return x", "auto", "def f(x):", "") == "\n    return x"
    # the code that follows the cursor already is that line: nothing to offer
    assert postprocess("\n    return y\n", "line", "    y = foo()", "\n    return y\n") == ""
    # the model continues the line itself: the line as before
    assert postprocess(" + 1\n    return x", "line", "    y = foo()", "") == " + 1"
    assert postprocess("\n\n", "line", "y = foo()", "") == ""


def test_statement_balances_brackets_across_lines() -> None:
    raw = "call(a,\n     b)\nnext_line()\n"
    assert postprocess(raw, "statement", "x = ", "") == "call(a,\n     b)"


def test_statement_counts_brackets_open_in_the_line_prefix() -> None:
    raw = "a,\n    b)\nz = 1"
    assert postprocess(raw, "statement", "x = f(", "") == "a,\n    b)"
    assert postprocess("1, 2]\nz", "statement", "x = [", "") == "1, 2]"


def test_statement_reads_the_completion_from_inside_a_string_the_line_prefix_left_open() -> None:
    """`add_argument("--` leaves a string open: the completion's first quote closes it, so the statement ends
    with the call's line (read from outside the string, the quote opened one and five more lines followed)."""
    prefix = 'parser = argparse.ArgumentParser()\nparser.add_argument("--'
    text = 'checkpoint_path", type=str, required=True)\nparser.add_argument("--config_path", type=str)\n'
    assert choose_kind(prefix) == "statement"
    assert postprocess(text, "auto", prefix, "") == 'checkpoint_path", type=str, required=True)'
    assert is_finished(text[:text.index("\n") + 1], "auto", prefix)
    assert not is_finished('checkpoint_path", type=str', "auto", prefix)
    # a triple-quoted string left open runs on over lines until it closes
    doc = 'run(help="""Usage:'
    assert postprocess(' a\nb""", x=1)\ny = 2', "statement", doc, "") == ' a\nb""", x=1)'


def test_statement_ignores_brackets_in_strings_and_comments() -> None:
    raw = "'(' + s  # ( not code\nz = 1"
    assert postprocess(raw, "statement", "x = ", "") == "'(' + s  # ( not code"
    raw = '"""doc (\n"""\nz = 1'
    assert postprocess(raw, "statement", "x = ", "") == '"""doc (\n"""'


def test_statement_backslash_continuation() -> None:
    assert postprocess("a + \\\n    b\nc", "statement", "x = ", "") == "a + \\\n    b"


def test_open_brackets() -> None:
    assert open_brackets("x = foo(a, [1, ") == 2
    assert open_brackets("x = ')' + (") == 1
    assert open_brackets("x) = (") == 0  # never negative


PREFIX_BODY = "import os\n\ndef walk(root):\n    "


def test_function_ends_at_dedent_to_the_def() -> None:
    raw = "out = []\n    for p in os.listdir(root):\n        out.append(p)\n\n    return out\n\ndef other():\n    pass\n"
    assert postprocess(raw, "function", PREFIX_BODY, "") == (
        "out = []\n    for p in os.listdir(root):\n        out.append(p)\n\n    return out"
    )


def test_function_written_from_its_def_line() -> None:
    raw = "def f(x):\n    y = x + 1\n    return y\nprint(f(1))\n"
    assert postprocess(raw, "function", "import os\n", "") == "def f(x):\n    y = x + 1\n    return y"


def test_function_in_a_method() -> None:
    prefix = "class A:\n    def m(self):\n        "
    raw = "x = 1\n        return x\n    def n(self):\n        pass"
    assert postprocess(raw, "function", prefix, "") == "x = 1\n        return x"


def test_function_without_def_ends_at_the_block() -> None:
    raw = "a = 1\n    b = 2\nc = 3"
    assert postprocess(raw, "function", "if x:\n    ", "") == "a = 1\n    b = 2"


@pytest.mark.parametrize(
    ("prefix", "text", "kind"),
    [
        ("x = foo(a, ", "", "statement"),
        ("x = foo(a)", "", "line"),
        ("def f(x):\n    ", "", "function"),
        ("x = 1\n", "def g():\n    pass", "function"),
        ("x = 1\n", "y = 2", "statement"),
        ("", "", "statement"),
    ],
)
def test_auto_kind(prefix: str, text: str, kind: str) -> None:
    assert choose_kind(prefix, text) == kind


def test_auto_uses_the_chosen_kind() -> None:
    assert postprocess("a, b)\nz", "auto", "x = f(", "") == "a, b)"
    assert postprocess("bar\nz", "auto", "x = foo.", "") == "bar"


def test_suffix_on_the_same_line_is_not_repeated() -> None:
    # The editor auto-closed the bracket: the completion must not close it again.
    assert postprocess("a, b)\nnext", "line", "x = f(", ")\nrest()") == "a, b"
    assert postprocess("a, b):\n", "line", "if f(", "):") == "a, b"


def test_completion_running_into_the_following_code_is_cut() -> None:
    raw = "total = 0\n    for x in xs:\n        total += x\n    return total\n"
    suffix = "\n    return total\n"
    assert postprocess(raw, "function", "def s(xs):\n    ", suffix) == "total = 0\n    for x in xs:\n        total += x"


def test_unrelated_suffix_leaves_the_text_alone() -> None:
    assert postprocess("foo(1)", "line", "x = ", "\ny = 2") == "foo(1)"


def test_unknown_kind() -> None:
    with pytest.raises(ValueError, match="unknown completion kind"):
        postprocess("x", "paragraph", "", "")


@pytest.mark.parametrize("text, prefix, finished", [
    ("foo(x)", "a = ", False),  # the line may go on
    ("foo(x)\n", "a = ", True),  # a line break ends the cursor's line
    ("\n", "a = 1", False),  # code on the cursor line ended at once: the next statement is the answer ...
    ("\n    b = (1,", "a = 1", False),
    ("\n    b = (1,\n 2)\n", "a = 1", True),  # ... once it is complete
    ("\n\n", "x = 1\n", False),  # an empty cursor line: blank lines before the code do not count
    ("bar(1,\n", "y = (", False),  # an open bracket: the statement goes on
    ("1, 2)\nz", "y = (", True),
    ("    return 1\n\n", "def f():\n", False),  # a function body may go on after a blank line
    ("    return 1\n\ndef g", "def f():\n", True),  # ... and ends at the next line at the def's indentation
])
def test_is_finished_once_more_text_cannot_change_the_cut(text: str, prefix: str, finished: bool) -> None:
    assert is_finished(text, "auto", prefix) is finished
    if finished:  # whatever follows, postprocessing keeps the same completion
        assert postprocess(text + "more()\n  x", "auto", prefix, "") == postprocess(text, "auto", prefix, "")


@pytest.mark.parametrize("text, kept", [
    ("def test_param_with_space_", "def"), ("    if", ""), ("foo(a, b)", "foo(a, b)"), ("x.y", "x."),
    ("total = f(x) + ", "total = f(x) + "), ("", ""), ("naïve_é", ""),
])
def test_drop_cut_word_removes_a_word_that_runs_into_the_cut(text: str, kept: str) -> None:
    assert drop_cut_word(text) == kept


@pytest.mark.parametrize("text, prefix, kept", [
    (" self.x = 1", "def f(self):\n        ", "self.x = 1"),  # an empty line's indentation: the model's own space
    ("  5\n", "x = ", "5"),  # after `= `
    (" if y:\n        z()", "def f():\n    ", "if y:\n        z()"),  # the first line only: the rest keep theirs
    (" 5", "x =", " 5"),  # no blank before the cursor: the answer's space is the one the line needs
])
def test_an_answer_after_a_blank_starts_without_blanks_of_its_own(text: str, prefix: str, kept: str) -> None:
    """What the editor inserts: a doubled blank would misindent the line (Python reads one more space as a
    different block), and the answer's first character is what the user types next (typing through it)."""
    assert postprocess(text, "auto", prefix, "") == kept
