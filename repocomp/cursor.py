"""A buffer cut at the cursor: made once per request, read by every stage after it (the language server's
request, its generation sharing, the engine's hole), so the buffer is split and cut in one place."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from repocomp.errors import RepocompError

__all__ = ["Cut"]


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
