"""RepoCoder windows: `window` lines, a new one every `stride` lines; identical windows are one fragment."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from repocomp.index.records import decoded


@dataclass(frozen=True, order=True, slots=True)
class Location:
    """Where a fragment's text stands: `path` relative to the repository root (POSIX), lines 0-indexed half-open."""

    path: str
    start_line: int
    end_line: int


class Fragment:
    """One unique window text and every place it occurs.

    The text is held as a slice of a file's text (`source[start:end]`), made when read: windows overlap, so a copy
    per window would hold each line window/stride times over. The source of a loaded index is the UTF-8 bytes of
    the index file's texts (start and end in bytes), decoded when read."""

    __slots__ = ("id", "locations", "_source", "_start", "_end")

    def __init__(self, id: int, text: str | np.ndarray, locations: list[Location] | None = None,
                 start: int = 0, end: int | None = None) -> None:
        self.id = id
        self.locations = [] if locations is None else locations
        self._source, self._start, self._end = text, start, len(text) if end is None else end

    @property
    def text(self) -> str:
        source = self._source
        if not isinstance(source, str):
            return decoded(source[self._start:self._end])
        if self._start == 0 and self._end == len(source):
            return source
        return source[self._start:self._end]

    def point_at(self, source: str, start: int, end: int) -> None:
        """Take the same text from `source[start:end]` (a file's current text) instead."""
        self._source, self._start, self._end = source, start, end

    def detach(self, source: str | np.ndarray) -> None:
        """Hold a copy of the text if it is a slice of `source` (a file text being dropped)."""
        if self._source is source:
            self._source, self._start, self._end = self.text, 0, self._end - self._start

    def __repr__(self) -> str:
        return f"Fragment({self.id}, {self.text!r}, {self.locations!r})"


def line_starts(text: str) -> list[int]:
    """The offset of each line of `text` in it, then len(text) + 1: line i's text is text[s[i]:s[i + 1] - 1]."""
    starts = [0]
    for line in text.split("\n"):
        starts.append(starts[-1] + len(line) + 1)
    return starts


def window_spans(n_lines: int, window: int, stride: int) -> list[tuple[int, int]]:
    """Half-open line spans of the windows of a file with `n_lines` lines.

    As RepoCoder: windows start every `stride` lines; the last one ends at the file's end, so every line is
    covered and no window is a strict suffix-duplicate of the previous one.
    """
    if n_lines <= 0:
        return []
    spans = []
    start = 0
    while True:
        end = min(start + window, n_lines)
        spans.append((start, end))
        if end >= n_lines:
            return spans
        start += stride
