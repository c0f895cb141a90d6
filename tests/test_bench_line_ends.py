"""`repocomp bench line-ends` picks code lines of a file the same way every time (the Neovim run itself is the
benchmark; its driver step is covered by the editor tests)."""

from __future__ import annotations

from lsp_bench.line_ends import pick_lines

SOURCE = '''"""Docstring."""
# a comment
import os


def f(x):
    // not python, but a comment form the picker skips too
    return os.path.join(x, "a")

'''


def test_only_code_lines_before_the_last_one_are_picked() -> None:
    assert pick_lines(SOURCE, 30, seed=0) == [1, 3, 6]  # not blank, not a comment, not the last code line (8)


def test_the_pick_is_seeded_and_sorted() -> None:
    text = "\n".join(f"x{i} = {i}" for i in range(200))
    first, again, other = pick_lines(text, 30, 1), pick_lines(text, 30, 1), pick_lines(text, 30, 2)
    assert first == again == sorted(first) and len(first) == 30 and first != other
    assert 200 not in first  # the last line has no next line to offer
