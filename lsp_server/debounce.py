"""How long a completion request waits before it starts a generation, from how fast the user is typing.

Editors ask for ghost text whenever the cursor stops (Neovim after 200 ms, VS Code at once); while someone types,
most of these requests are superseded by the next keystroke, and each generation started for one of them costs a
model's time for nothing (seconds of a CPU's time with the local model). As Tabby does, the wait adapts to the
typing rate: the editor must have been quiet for a multiple of the recent time between keystrokes (seen as
`didChange` text), capped, counted from the last keystroke, not from the request: an editor that debounces
itself (Neovim waits 200 ms) has already waited part or all of it. The wait is at most a share of what a wasted
generation costs, and none when a generation takes less than the time between keystrokes (it ends before the
next key could supersede it). No wait when the user is not typing (a request after a pause, or after a cursor
move, starts at once), nor when the editor asked for fewer completions than half the keystrokes lately: it
debounces its requests itself (Neovim asks after 200 ms without a keystroke), so a request already means a
pause, and the server cannot see when the key was pressed (Neovim batches `didChange` for 150 ms and flushes it
just before the request: the text looks fresh when it is not).
"""

from __future__ import annotations

import time
from collections import deque

WINDOW_S = 1.5  # keystrokes this recent tell the typing rate
MIN_KEYS = 3  # fewer in the window: not typing, no wait
FACTOR = 1.5  # wait this many typical keystroke intervals
MAX_WAIT_S = 0.3
COST_SHARE = 0.5  # the wait is at most this share of a typical generation's time


_Events = dict[str, deque[tuple[float, int]]]  # per document: (time, count), the last WINDOW_S seconds


def _record(table: _Events, key: str, count: int, now: float | None) -> None:
    now = time.monotonic() if now is None else now
    events = table.setdefault(key, deque())
    events.append((now, count))
    while events and events[0][0] < now - WINDOW_S:
        events.popleft()


def _recent(table: _Events, key: str, now: float) -> int:
    return sum(n for t, n in table.get(key, ()) if t >= now - WINDOW_S)


class TypingRate:
    """Per document: when text changed and by how many characters, and when completions were asked for; the
    wait before generating."""

    def __init__(self) -> None:
        self._changes: _Events = {}
        self._requests: _Events = {}

    def changed(self, key: str, chars: int, now: float | None = None) -> None:
        _record(self._changes, key, max(1, chars), now)  # a deletion is a keystroke too

    def requested(self, key: str, now: float | None = None) -> None:
        """A completion request arrived for the document (served or not)."""
        _record(self._requests, key, 1, now)

    def wait_s(self, key: str, generation_s: float, now: float | None = None) -> float:
        """What is left, since the last keystroke, of a quiet time of FACTOR x the recent keystroke interval (capped
        by MAX_WAIT_S and COST_SHARE x `generation_s`, a typical generation's time); 0 when fewer than MIN_KEYS
        keys were typed lately, a generation is quicker than a keystroke interval, or the editor debounces its
        requests itself (fewer than one for every two keys lately)."""
        now = time.monotonic() if now is None else now
        keys, requests = _recent(self._changes, key, now), _recent(self._requests, key, now)
        interval_s = WINDOW_S / keys if keys else float("inf")
        if keys < MIN_KEYS or generation_s <= interval_s or 2 * requests < keys:
            return 0.0
        quiet_s = now - self._changes[key][-1][0]
        return max(0.0, min(MAX_WAIT_S, FACTOR * interval_s, COST_SHARE * generation_s) - quiet_s)

    def forget(self, key: str) -> None:
        self._changes.pop(key, None)
        self._requests.pop(key, None)
