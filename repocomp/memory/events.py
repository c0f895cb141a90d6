"""The plain events the session memory takes: edits as an editor reports them (no LSP types here)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TextEdit"]


@dataclass(frozen=True)
class TextEdit:
    """One change as an editor reports it, applied to the text as it was before this change.

    Positions are 0-based lines and columns in Python characters (the LSP layer converts UTF-16 units); `path`
    is relative to the folder root, POSIX. Several changes of one editor event (multi-cursor) are several
    TextEdits, each applied to the text the previous one left (as LSP `contentChanges` are)."""

    path: str
    start_line: int
    start_col: int
    end_line: int
    end_col: int
    removed: str  # the text that was in the range ("" for a pure insertion)
    inserted: str  # the new text ("" for a pure deletion)
    time: float
