"""A buffer cut at the cursor: made once per request, read by every stage after it (the language server's
request, its generation sharing, the engine's hole), so the buffer is split and cut in one place."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from repocomp.errors import RepocompError
from repocomp.prompt.languages import rules_for_path

__all__ = ["Cut", "Hole"]


@dataclass(frozen=True)
class Cut:
    """The buffer's lines (split on "\\n": the engine's view) and the cursor, 0-based, checked to be inside."""

    lines: tuple[str, ...]
    line: int
    col: int

    @classmethod
    def of(cls, text: str, line: int, col: int, name: str = "the buffer") -> Cut:
        """`text` cut at (line, col); a RepocompError naming `name` when the cursor is outside it."""
        return cls.from_lines(text.split("\n"), line, col, name)

    @classmethod
    def from_lines(cls, lines: list[str] | tuple[str, ...], line: int, col: int, name: str = "the buffer") -> Cut:
        if not 0 <= line < len(lines):
            raise RepocompError(f"line {line + 1} is outside {name} ({len(lines)} lines)")
        if not 0 <= col <= len(lines[line]):
            raise RepocompError(f"column {col + 1} is outside line {line + 1} of {name} ({len(lines[line])} chars)")
        return cls(tuple(lines), line, col)

    @functools.cached_property
    def text(self) -> str:
        return "\n".join(self.lines)

    @property
    def line_text(self) -> str:
        return self.lines[self.line]

    @property
    def partial(self) -> str:
        """The cursor's line up to the cursor."""
        return self.lines[self.line][: self.col]

    @functools.cached_property
    def before(self) -> str:
        """The whole buffer before the cursor."""
        return "\n".join(self.lines[: self.line] + (self.partial,))

    @functools.cached_property
    def after(self) -> str:
        """The whole buffer from the cursor on."""
        return "\n".join((self.lines[self.line][self.col:],) + self.lines[self.line + 1:])


@dataclass(frozen=True)
class Hole:
    """Where the completion goes: the buffer cut at the cursor, its path, and the line above which the in-file
    context (and the query) never starts."""

    path: str  # relative to the index root
    cut: Cut
    context_start_line: int = 0

    @property
    def lines(self) -> tuple[str, ...]:
        return self.cut.lines

    @property
    def line(self) -> int:
        return self.cut.line

    @property
    def col(self) -> int:
        return self.cut.col

    @property
    def partial(self) -> str:
        """The cursor line up to the cursor."""
        return self.cut.partial

    @functools.cached_property
    def before(self) -> list[str]:
        """Whole lines from context_start_line up to the cursor's."""
        return list(self.cut.lines[self.context_start_line:self.cut.line])

    @functools.cached_property
    def prefix(self) -> str:
        return self.cut.before if self.context_start_line == 0 else "\n".join(self.before + [self.partial])

    @property
    def suffix(self) -> str:
        return self.cut.after

    @property
    def language(self) -> str:
        """The buffer's language (postprocessing's comment, string and block rules; Python for unknown files)."""
        return rules_for_path(self.path).name

    @property
    def query_lines(self) -> list[str]:
        """The lines before the cursor that a first-round query is made of (the partial line when not empty)."""
        return self.before + ([self.partial] if self.partial else [])
