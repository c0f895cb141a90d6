"""RepoCoder windows: `window` lines, a new one every `stride` lines; identical windows are one fragment."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, order=True)
class Location:
    """Where a fragment's text stands: `path` relative to the repository root (POSIX), lines 0-indexed half-open."""

    path: str
    start_line: int
    end_line: int


@dataclass
class Fragment:
    """One unique window text and every place it occurs."""

    id: int
    text: str
    locations: list[Location] = field(default_factory=list)


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


def window_text(lines: list[str], start: int, end: int) -> str:
    return "\n".join(lines[start:end])
