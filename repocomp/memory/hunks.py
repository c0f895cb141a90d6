"""Edit hunks: the keystrokes of one place coalesced into one change (MemGPT's events, SCM's flash memory).

A `HunkTracker` keeps the text of each open file and turns `TextEdit`s into `Hunk`s: an edit that touches a
hunk's lines (or lands within `merge_gap_lines` of it while the hunk is fresh, `merge_gap_s`) joins it; one far
away starts its own (several cursors at distant places make several hunks, close ones merge). A hunk holds whole
lines: `removed` as they were before its first edit, `inserted` as they are now; common leading and trailing
lines are trimmed, so an edit that restores the original (typing then deleting, undo) leaves nothing and the hunk
is dropped. An edit above a hunk shifts its `start_line`. The tracker is bounded in hunks and bytes: past either,
the least recently touched hunks leave (the session moves them to recall storage).
"""

from __future__ import annotations

import hashlib
import logging
from collections import OrderedDict
from dataclasses import dataclass, field

from repocomp.memory.events import TextEdit

__all__ = ["Hunk", "HunkTracker", "hunk_bytes"]

log = logging.getLogger(__name__)

MAX_DOC_CHARS = 8_000_000  # a file larger than this is not tracked (its edits are ignored)
MAX_OPEN_DOCS = 512  # open files whose text is kept; past it the least recently used is forgotten
_HUNK_OVERHEAD = 64  # bytes counted per hunk beyond its text


@dataclass
class Hunk:
    """Edits in one place coalesced. Lines are 0-based; `start_line` is in the CURRENT text of the file."""

    id: int
    path: str
    start_line: int
    removed: list[str]  # whole lines as they were before the hunk's first edit
    inserted: list[str]  # whole lines as they are now
    first_time: float
    last_time: float
    source: str = "typed"  # "typed" | "accepted" (an accepted completion)

    @property
    def end_line(self) -> int:
        return self.start_line + len(self.inserted)


def hunk_bytes(hunk: Hunk) -> int:
    """What a hunk counts against a byte bound: its text (UTF-8) plus a fixed overhead."""
    return (_HUNK_OVERHEAD + len(hunk.path)
            + sum(len(line.encode("utf-8", "surrogatepass")) + 1 for line in hunk.removed)
            + sum(len(line.encode("utf-8", "surrogatepass")) + 1 for line in hunk.inserted))


def _digest(lines: list[str]) -> bytes:
    return hashlib.blake2b("\n".join(lines).encode("utf-8", "surrogatepass"), digest_size=16).digest()


@dataclass
class _Doc:
    lines: list[str]
    hunk_ids: list[int] = field(default_factory=list)
    chars: int = 0


class HunkTracker:
    """Per folder: keeps each open file's text and turns TextEdits into Hunks (see the module docstring)."""

    def __init__(self, max_hunks: int = 200, max_bytes: int = 256_000, merge_gap_lines: int = 2,
                 merge_gap_s: float = 60.0) -> None:
        self.max_hunks = max(1, int(max_hunks))
        self.max_bytes = max(1, int(max_bytes))
        self.merge_gap_lines = max(0, int(merge_gap_lines))
        self.merge_gap_s = float(merge_gap_s)
        self._docs: OrderedDict[str, _Doc] = OrderedDict()  # open files, least recently used first
        self._closed: OrderedDict[str, bytes] = OrderedDict()  # digest of a closed file's text (reopen check)
        self._hunks: dict[int, Hunk] = {}  # by id, in creation order
        self._sizes: dict[int, int] = {}
        self._bytes = 0
        self._next_id = 1
        self._evicted: list[Hunk] = []  # hunks that left for a bound, until the session takes them

    # -- files ---------------------------------------------------------------------------------------------
    def opened(self, path: str, text: str) -> None:
        if len(text) > MAX_DOC_CHARS:
            log.debug("memory: %s is too large to track (%d characters)", path, len(text))
            self._forget_doc(path)
            return
        lines = text.split("\n")
        doc = self._docs.get(path)
        if doc is not None and doc.lines == lines:
            self._docs.move_to_end(path)
            return
        digest = self._closed.pop(path, None)
        ids = [h.id for h in self._hunks.values() if h.path == path]
        if ids and (doc is None and digest != _digest(lines) or doc is not None):
            # the text changed behind our back: the hunks' lines no longer say where they are
            for hid in ids:
                self._evict(hid)
            ids = []
        self._docs[path] = _Doc(lines, ids, len(text))
        self._docs.move_to_end(path)
        while len(self._docs) > MAX_OPEN_DOCS:
            old, _ = next(iter(self._docs.items()))
            self.closed(old)

    def closed(self, path: str) -> None:
        doc = self._docs.pop(path, None)
        if doc is None:
            return
        self._closed[path] = _digest(doc.lines)
        while len(self._closed) > 4 * MAX_OPEN_DOCS:
            self._closed.popitem(last=False)

    def _forget_doc(self, path: str) -> None:
        self._docs.pop(path, None)
        self._closed.pop(path, None)

    def text(self, path: str) -> str | None:
        """The tracked text of an open file (None when not open)."""
        doc = self._docs.get(path)
        return None if doc is None else "\n".join(doc.lines)

    def lines(self, path: str, start: int, end: int) -> list[str]:
        """Lines [start, end) of an open file's tracked text (what of them there is; none when not open)."""
        doc = self._docs.get(path)
        return [] if doc is None else doc.lines[max(0, start):max(0, end)]

    # -- hunks ---------------------------------------------------------------------------------------------
    def hunks(self) -> list[Hunk]:
        """Oldest first (by creation); an undone hunk (inserted == removed) is never among them."""
        return list(self._hunks.values())

    def get(self, hunk_id: int) -> Hunk | None:
        return self._hunks.get(hunk_id)

    @property
    def bytes(self) -> int:
        return self._bytes

    def take_evicted(self) -> list[Hunk]:
        """The hunks that left for a bound (or a file changed behind our back) since the last call."""
        out, self._evicted = self._evicted, []
        return out

    def restore_ids(self, next_id: int) -> None:
        """New hunks get ids from `next_id` on (after a restart, past the stored ones)."""
        self._next_id = max(self._next_id, int(next_id))

    def clear(self) -> None:
        """Forget every hunk (the open files' texts stay)."""
        for hunk_id in list(self._hunks):
            self._unlink(hunk_id)
        self._evicted = []

    def discard(self, path: str) -> list[Hunk]:
        """Forget the file and its hunks (the developer closed it without saving: those edits are abandoned);
        each comes back as a tombstone, as an undone hunk does."""
        gone = [self._drop(hunk_id) for hunk_id in [h.id for h in self._hunks.values() if h.path == path]]
        self._forget_doc(path)
        return gone

    def mark(self, hunk_id: int, source: str) -> None:
        hunk = self._hunks.get(hunk_id)
        if hunk is not None:
            hunk.source = source

    def apply(self, edit: TextEdit) -> list[Hunk]:
        """Apply one edit to the file's text; the hunks created or changed by it. A hunk that this edit undid or
        merged into another comes back as a tombstone (a copy whose inserted == removed == []): it is gone."""
        doc = self._docs.get(edit.path)
        if doc is None:
            log.debug("memory: edit of %s, which is not open; ignored", edit.path)
            return []
        self._docs.move_to_end(edit.path)
        change = _change(doc.lines, edit)
        if change is None:
            return []
        a, b, old_seg, new_seg = change
        doc.chars += sum(len(s) for s in new_seg) - sum(len(s) for s in old_seg)
        if doc.chars > MAX_DOC_CHARS:
            log.debug("memory: %s grew too large to track", edit.path)
            self._forget_doc(edit.path)
            return []
        mine = [self._hunks[i] for i in doc.hunk_ids]
        merged, lo, hi = self._joined(mine, a, b, edit.time)
        hi = min(hi, len(doc.lines) - 1)
        original = _before_hunks(doc.lines, merged, lo, hi)
        delta = len(new_seg) - len(old_seg)
        doc.lines[a:b + 1] = new_seg
        start, removed, inserted = _trim(lo, original, doc.lines[lo:hi + 1 + delta])
        for h in mine:  # the hunks below the region move with the edit
            if h.id not in merged and h.start_line > hi:
                h.start_line += delta
        out = self._settle(doc, edit, merged, start, removed, inserted)
        self._bound()
        return out

    def _joined(self, mine: list[Hunk], a: int, b: int, now: float) -> tuple[dict[int, Hunk], int, int]:
        """The hunks an edit of lines a..b joins: those it touches and fresh ones within the gap, then any inside
        the region they span; (them by id, the region's first and last line)."""
        merged: dict[int, Hunk] = {}
        for h in mine:
            lo_h, hi_h = h.start_line, max(h.end_line, h.start_line + 1) - 1  # an empty hunk stands on its line
            gap = max(a - hi_h - 1, lo_h - b - 1, -1)
            if gap < 0 or (gap < self.merge_gap_lines + 1 and now - h.last_time <= self.merge_gap_s):
                merged[h.id] = h
        lo, hi = a, b
        changed = True
        while changed:
            if merged:
                lo = min(a, *(h.start_line for h in merged.values()))
                hi = max(b, *(max(h.end_line, h.start_line + 1) - 1 for h in merged.values()))
            changed = False
            for h in mine:
                if h.id not in merged and h.start_line <= hi and max(h.end_line, h.start_line + 1) - 1 >= lo:
                    merged[h.id] = h
                    changed = True
        return merged, lo, hi

    def _settle(self, doc: _Doc, edit: TextEdit, merged: dict[int, Hunk], start: int, removed: list[str],
                inserted: list[str]) -> list[Hunk]:
        """The merged hunks become one (the oldest id), or a new hunk is made; tombstones for the others (all of
        them when the edit undid the region); the changed hunk first."""
        out: list[Hunk] = []
        keep_id = min(merged) if merged else None
        for hid in sorted(merged):
            if hid != keep_id or (not removed and not inserted):
                out.append(self._drop(hid))
        if not removed and not inserted:
            return out
        if keep_id is not None:
            hunk = self._hunks[keep_id]
            hunk.start_line, hunk.removed, hunk.inserted = start, removed, inserted
            hunk.first_time = min(h.first_time for h in merged.values())
            hunk.last_time = max(edit.time, hunk.last_time)
        else:
            hunk = Hunk(self._next_id, edit.path, start, removed, inserted, edit.time, edit.time)
            self._next_id += 1
            self._hunks[hunk.id] = hunk
            doc.hunk_ids.append(hunk.id)
            self._sizes[hunk.id] = 0
        self._resize(hunk)
        out.insert(0, hunk)
        return out

    # -- internals -----------------------------------------------------------------------------------------
    def _resize(self, hunk: Hunk) -> None:
        size = hunk_bytes(hunk)
        self._bytes += size - self._sizes.get(hunk.id, 0)
        self._sizes[hunk.id] = size

    def _unlink(self, hunk_id: int) -> Hunk:
        hunk = self._hunks.pop(hunk_id)
        self._bytes -= self._sizes.pop(hunk_id, 0)
        doc = self._docs.get(hunk.path)
        if doc is not None and hunk_id in doc.hunk_ids:
            doc.hunk_ids.remove(hunk_id)
        return hunk

    def _drop(self, hunk_id: int) -> Hunk:
        hunk = self._unlink(hunk_id)
        return Hunk(hunk.id, hunk.path, hunk.start_line, [], [], hunk.first_time, hunk.last_time, hunk.source)

    def _evict(self, hunk_id: int) -> None:
        self._evicted.append(self._unlink(hunk_id))

    def _bound(self) -> None:
        if len(self._hunks) <= self.max_hunks and self._bytes <= self.max_bytes:
            return
        by_age = sorted(self._hunks.values(), key=lambda h: (h.last_time, h.id))
        for hunk in by_age:
            if len(self._hunks) <= self.max_hunks and self._bytes <= self.max_bytes:
                break
            self._evict(hunk.id)


def _trim(start: int, before: list[str], after: list[str]) -> tuple[int, list[str], list[str]]:
    """Drop the lines `before` and `after` share at both ends: (new start, removed, inserted). The shared tail
    goes first, so that lines added above a run of equal lines (blank lines at the end of a file) leave the run
    out of the hunk: the next block appended below is then a hunk of its own."""
    s = 0
    while s < len(before) and s < len(after) and before[-1 - s] == after[-1 - s]:
        s += 1
    k = 0
    while k < len(before) - s and k < len(after) - s and before[k] == after[k]:
        k += 1
    return start + k, before[k:len(before) - s], after[k:len(after) - s]


def _change(lines: list[str], edit: TextEdit) -> tuple[int, int, list[str], list[str]] | None:
    """The edit clamped to the file: (first line, last line, those lines, what replaces them); None when it
    changes nothing."""
    n = len(lines)
    a = min(max(int(edit.start_line), 0), n - 1)
    b = min(max(int(edit.end_line), a), n - 1)
    sc = min(max(int(edit.start_col), 0), len(lines[a]))
    ec = min(max(int(edit.end_col), 0), len(lines[b])) if b > a else min(max(int(edit.end_col), sc), len(lines[b]))
    new_seg = (lines[a][:sc] + edit.inserted + lines[b][ec:]).split("\n")
    old_seg = lines[a:b + 1]
    return None if new_seg == old_seg else (a, b, old_seg, new_seg)


def _before_hunks(lines: list[str], merged: dict[int, Hunk], lo: int, hi: int) -> list[str]:
    """Lines lo..hi as they were before every merged hunk."""
    original: list[str] = []
    pos = lo
    for h in sorted(merged.values(), key=lambda h: (h.start_line, h.id)):
        original.extend(lines[pos:h.start_line])
        original.extend(h.removed)
        pos = max(pos, h.end_line)
    original.extend(lines[pos:hi + 1])
    return original
