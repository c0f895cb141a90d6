"""The session memory of one folder: its events recorded into MemGPT's tiers, and kept between sessions.

Tiers (MemGPT): the *queue* is the `HunkTracker`'s recent hunks; *recall storage* holds the older ones (those the
queue's bounds pushed out, and the previous sessions' from the `RecallStore`), searched through a MinHash index
(TiM's hash, `repocomp.memory.recall`); *thoughts* (TiM) are derived from every hunk as it changes.
`select` asks SCM's controller (`repocomp.memory.controller`) what the prompt shows of the session.
"""

from __future__ import annotations

import logging
import math
import re
from collections import OrderedDict, deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from repocomp.memory.controller import MAX_SHOWN_LINES, Controller, HunkVectors, MemoryDecision
from repocomp.memory.events import TextEdit
from repocomp.memory.hunks import Hunk, HunkTracker, hunk_bytes
from repocomp.memory.recall import MinHashIndex, memory_tokens
from repocomp.memory.store import RecallStore
from repocomp.memory.summaries import SessionSummary
from repocomp.memory.thoughts import Thought, think, visible

if TYPE_CHECKING:
    from repocomp.config.schema import MemoryConfig

__all__ = ["SessionMemory"]

log = logging.getLogger(__name__)

MAX_RECALL_HUNKS = 50_000
ACCEPT_WINDOW_S = 10.0  # an accepted completion and its edit belong together within this


class SessionMemory:
    """The editing session of one folder: events in, per-request decisions out (see the module docstring)."""

    def __init__(self, root: Path | None, config: MemoryConfig, store: RecallStore | None = None) -> None:
        self.root = root
        self.config = config
        if store is None and root is not None and config.persist and config.enabled:
            store = RecallStore(Path(root), config.store_max_bytes)
        self.store = store if config.persist else None
        self.tracker = HunkTracker(config.max_hunks, config.max_bytes)
        self.all_thoughts: list[Thought] = []
        self.recall: OrderedDict[int, Hunk] = OrderedDict()  # older hunks, least recent first
        self.recall_tokens: dict[int, frozenset[str]] = {}
        self.recall_bytes = 0
        self.recall_index: MinHashIndex[tuple[str, int | str]] = MinHashIndex()  # recall hunks ("h", id), thoughts ("t", key)
        self.thought_tokens: dict[str, tuple[str, frozenset[str]]] = {}  # key -> (text, tokens)
        self.thoughts_by_name: dict[str, set[str]] = {}  # identifier -> thought keys naming it
        self.hunk_vectors: dict[int, HunkVectors] = {}  # queue hunks' vectors, recomputed when they change
        self.clock = 0.0  # the session's latest event time
        self._shown: deque[tuple[str, int, str, float]] = deque(maxlen=64)
        self._pending: deque[tuple[str, int, str, float]] = deque(maxlen=8)  # accepted, edit not seen yet
        self._counts = {"edits": 0, "shown": 0, "accepted": 0}
        self.summary = SessionSummary() if config.summaries else None  # MemGPT's, written by the model
        self.controller = Controller(self)
        if self.store is not None:
            hunks, thoughts = self.store.load()
            for h in hunks:
                self._to_recall(h)
            self.all_thoughts = thoughts if config.thoughts else []
            self._reindex_thoughts()
            if hunks:
                self.tracker.restore_ids(max(h.id for h in hunks) + 1)
                self.clock = max(h.last_time for h in hunks)
            if self.all_thoughts:
                self.clock = max(self.clock, max(t.time for t in self.all_thoughts))

    # -- events --------------------------------------------------------------------------------------------
    def _tick(self, t: float) -> None:
        if math.isfinite(t):
            self.clock = max(self.clock, t)

    def opened(self, path: str, text: str, time: float) -> None:
        if not self.config.enabled:
            return
        self._tick(time)
        self.tracker.opened(path, text)
        self._take_evicted()

    def closed(self, path: str) -> None:
        self.tracker.closed(path)

    def discarded(self, path: str) -> None:
        """`path` was closed without saving: its unsaved edits are abandoned, so are its hunks and the thoughts
        only they supported (what was saved, or left for recall storage, stays)."""
        for tombstone in self.tracker.discard(path):
            self.hunk_vectors.pop(tombstone.id, None)
            if self.config.thoughts:
                self.all_thoughts = think(tombstone, self.all_thoughts)

    def edited(self, edit: TextEdit) -> None:
        if not self.config.enabled:
            return
        self._tick(edit.time)
        self._counts["edits"] += 1
        changed = self.tracker.apply(edit)
        for hunk in changed:
            self.hunk_vectors.pop(hunk.id, None)
            if hunk.removed or hunk.inserted:
                self._match_accepted(hunk)
            if self.config.thoughts:
                self.all_thoughts = think(hunk, self.all_thoughts)
        self._take_evicted()
        if changed and self.config.thoughts:
            self._reindex_thoughts()

    def completion_shown(self, path: str, line: int, text: str, time: float) -> None:
        if not self.config.enabled:
            return
        self._tick(time)
        self._counts["shown"] += 1
        self._shown.append((path, line, text[:1000], time))

    def completion_accepted(self, path: str, line: int, text: str, time: float) -> None:
        """An accepted completion: the hunk holding it (its edit may come before or after this) is `accepted`."""
        if not self.config.enabled:
            return
        self._tick(time)
        self._counts["accepted"] += 1
        first = next((ln.strip() for ln in text.split("\n") if ln.strip()), "")
        if not first:
            return
        for hunk in self.tracker.hunks():
            if (hunk.path == path and hunk.start_line <= line < max(hunk.end_line, hunk.start_line + 1)
                    and time - hunk.last_time <= ACCEPT_WINDOW_S and any(first in ln for ln in hunk.inserted)):
                self.tracker.mark(hunk.id, "accepted")
                return
        self._pending.append((path, line, first, time))

    def _match_accepted(self, hunk: Hunk) -> None:
        for item in list(self._pending):
            path, _line, first, t = item
            if hunk.path == path and abs(hunk.last_time - t) <= ACCEPT_WINDOW_S and \
                    any(first in ln for ln in hunk.inserted):
                self.tracker.mark(hunk.id, "accepted")
                self._pending.remove(item)
                return

    # -- tiers ---------------------------------------------------------------------------------------------
    def _take_evicted(self) -> None:
        for hunk in self.tracker.take_evicted():
            self.hunk_vectors.pop(hunk.id, None)
            self._to_recall(hunk)

    def _to_recall(self, hunk: Hunk) -> None:
        if hunk.id in self.recall:
            self._drop_recall(hunk.id)
        size = hunk_bytes(hunk)
        if size > self.config.store_max_bytes // 4:  # a huge paste: its first lines stand for it
            hunk = Hunk(hunk.id, hunk.path, hunk.start_line, hunk.removed[:MAX_SHOWN_LINES],
                        hunk.inserted[:MAX_SHOWN_LINES], hunk.first_time, hunk.last_time, hunk.source)
            size = hunk_bytes(hunk)
            if size > self.config.store_max_bytes // 4:
                return
        self.recall[hunk.id] = hunk
        self.recall_bytes += size
        tokens = memory_tokens("\n".join(hunk.removed + hunk.inserted))
        self.recall_tokens[hunk.id] = tokens
        self.recall_index.add(("h", hunk.id), tokens)
        while self.recall and (self.recall_bytes > self.config.store_max_bytes
                                or len(self.recall) > MAX_RECALL_HUNKS):
            self._drop_recall(next(iter(self.recall)))

    def _drop_recall(self, hunk_id: int) -> None:
        hunk = self.recall.pop(hunk_id)
        self.recall_bytes -= hunk_bytes(hunk)
        self.recall_tokens.pop(hunk_id, None)
        self.recall_index.remove(("h", hunk_id))

    def _reindex_thoughts(self) -> None:
        live = {t.key: t for t in self.all_thoughts if visible(t)}
        for key in [k for k in self.thought_tokens if k not in live]:
            _, tokens = self.thought_tokens.pop(key)
            self.recall_index.remove(("t", key))
            for name in tokens:
                keys = self.thoughts_by_name.get(name)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del self.thoughts_by_name[name]
        for key, t in live.items():
            old = self.thought_tokens.get(key)
            if old is not None and old[0] == t.text:
                continue
            if old is not None:
                for name in old[1]:
                    self.thoughts_by_name.get(name, set()).discard(key)
            tokens = memory_tokens(_thought_words(t))
            self.thought_tokens[key] = (t.text, tokens)
            self.recall_index.add(("t", key), tokens)
            for name in tokens:
                self.thoughts_by_name.setdefault(name, set()).add(key)

    def hunks(self) -> list[Hunk]:
        """The queue's hunks, oldest first (recall storage's older ones are not among them)."""
        return self.tracker.hunks()

    def thoughts(self) -> list[Thought]:
        """The thoughts worth showing (a repeated shape once it is in two places), oldest first."""
        return [t for t in self.all_thoughts if visible(t)]

    def select(self, path: str, line: int, prefix_lines: list[str], budget_tokens: int,
               count_tokens: Callable[[str], int],
               relation: Callable[[str, int, str, int], float] | None = None) -> MemoryDecision:
        """SCM's controller: what the prompt shows of the session for this request (`repocomp.memory.controller`)."""
        return self.controller.select(path, line, prefix_lines, budget_tokens, count_tokens, relation)

    # -- persistence and upkeep ----------------------------------------------------------------------------
    def save(self) -> None:
        """Write the whole history (queue and recall storage) and the thoughts to the recall storage file."""
        if self.store is None:
            return
        hunks = list(self.recall.values()) + self.tracker.hunks()
        self.store.save(hunks, self.all_thoughts)

    def clear(self) -> None:
        """Forget the session: the queue, recall storage (and its file) and the thoughts (open files stay)."""
        self.tracker.clear()
        self.all_thoughts = []
        self._reindex_thoughts()
        for hid in list(self.recall):
            self._drop_recall(hid)
        self.hunk_vectors.clear()
        self._pending.clear()
        self._shown.clear()
        if self.summary is not None:
            self.summary.forget()
        if self.store is not None:
            self.store.clear()

    def stats(self) -> dict[str, int]:
        return {"hunks": len(self.tracker.hunks()), "hunk_bytes": self.tracker.bytes,
                "recall_hunks": len(self.recall), "recall_bytes": self.recall_bytes,
                "thoughts": len(self.thoughts()), "latent_thoughts": len(self.all_thoughts) - len(self.thoughts()),
                "edits": self._counts["edits"], "shown": self._counts["shown"],
                "accepted": self._counts["accepted"],
                "summaries": self.summary.calls if self.summary is not None else 0,
                "summaries_answered": self.summary.answered if self.summary is not None else 0,
                "summaries_cancelled": self.summary.cancelled if self.summary is not None else 0}


def _thought_words(t: Thought) -> str:
    """The text a thought's vector is made of: the code it names (in backquotes) and its key, not its English."""
    code = re.findall(r"`([^`]*)`", t.text)
    key = t.key.split(":", 1)[1] if t.kind != "repeated" else ""
    return " ".join(code) + " " + key.replace("->", " ")

