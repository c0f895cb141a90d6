"""The session memory of one folder and its controller (MemGPT's tiers, SCM's controller, FragRel's relations).

Tiers (MemGPT): the *queue* is the `HunkTracker`'s recent hunks; *recall storage* holds the older ones (those the
queue's bounds pushed out, and the previous sessions' from the `RecallStore`), searched through a MinHash index
(TiM's hash, `repocomp.memory.recall`); *thoughts* (TiM) are derived from every hunk as it changes.

`select` is SCM's controller, per completion request:
1. candidates: every queue hunk; the recall hunks sharing a hash bucket with the query (the identifiers of the
   last `query_lines` lines before the cursor) or lying in the cursor's file; the thoughts sharing a bucket, naming
   a query identifier or supported by a candidate hunk. A hunk whose inserted lines are all visible already
   (in `prefix_lines`) is never a candidate, nor anything from the future (after the session's clock).
2. score (cheap signals only): `s_ind = overlap + 0.3 * proximity + analog` where overlap is the Jaccard
   similarity of the entry's identifiers with the query's (for a thought, which names two or three identifiers,
   the share of them the query holds), proximity `exp(-distance / 40 lines)` in the cursor's file, analog the
   Jaccard similarity (from 0.5) of the code a queue hunk replaced with the code replaced at the cursor (the same
   edit made elsewhere before); FragRel over the session: `s_rel = s_ind + alpha * s_env`,
   `s_env_i = (w_ic + sum_j w_ij s_ind_j) / max(1, w_ic + sum_j w_ij)` with `w` the `relation` callback's strength
   to the cursor (c, whose own s_ind is 1) and to the other shortlisted entries (FragRel Eq. 9, the denominator
   floored at 1 so that one weak relation stays weak); recency multiplies:
   `score = s_rel * (0.5 + 0.5 * 2^(-age / half_life_s))`, age on the session's clock (its latest event).
3. decide: the hunk at the cursor (the cursor inside or right after its inserted lines) that replaced code is what
   the developer is rewriting, the strongest signal there is: its removed lines, from the one matching the last
   line typed, come first as code (`replaced`, cut to the budget), with the session's rename thoughts applied
   (TiM: `total` became `amount` elsewhere, so it does here too). Without it, nothing scoring `min_score` or more
   -> not consulted (the reason names the best score). Then the best `max_entries`, each a full hunk or, when its
   text would take over a third of the budget (two thirds for an analog), its thought or a one-line summary (SCM's
   summary-vs-full); while they exceed the budget, the oldest full hunk is replaced by its summary (MemGPT's
   eviction into a summary), and past that the weakest entry leaves. The decision's `budget_tokens` is what the
   entries take (as the prompt shows them: header and comment markers counted).
"""

from __future__ import annotations

import difflib
import heapq
import logging
import math
import re
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from repocomp.memory.events import TextEdit
from repocomp.memory.hunks import Hunk, HunkTracker, hunk_bytes
from repocomp.memory.recall import MinHashIndex, jaccard, memory_tokens
from repocomp.memory.store import RecallStore
from repocomp.memory.thoughts import Thought, think, visible
from repocomp.prompt import RecentSource

if TYPE_CHECKING:
    from repocomp.config import MemoryConfig

__all__ = ["MemoryDecision", "MemoryEntry", "SessionMemory"]

log = logging.getLogger(__name__)

W_PROXIMITY = 0.3  # weight of the distance in lines (same file) beside the token overlap
DISTANCE_SCALE = 40.0  # lines: proximity exp(-distance / scale)
THOUGHT_FILE = 0.5  # a thought about the cursor's file: its proximity
SHORTLIST = 8  # entries whose relations (to the cursor and each other) are asked of the graph
RECENT_RELATED = 4  # the most recent queue hunks always asked about (an edit elsewhere the cursor's code calls)
RECALL_CANDIDATES = 256  # recall entries taken from the hash buckets (TiM's first stage), at most
RECALL_TOP = 32  # recall hunks kept after the exact similarity (TiM's second stage)
HUNK_TOP = 48  # hunks (queue and recall) scored in full after the cheap first pass
SAME_FILE_RECALL = 64  # recall hunks of the cursor's file always scored
FULL_SHARE = 1 / 3  # a hunk taking more of the budget than this is shown as its thought or summary
MAX_SHOWN_LINES = 40  # lines of one hunk rendered in full (a longer one is over any sane share anyway)
MAX_SHOWN_REMOVED = 3  # removed lines shown (as `was: ...`) before the inserted ones
REPLACED_BEFORE = 2  # replaced lines shown above the one the cursor's line takes the place of (the copy's anchor)
ANALOG_MIN = 0.5  # Jaccard of the code a hunk replaced with the code replaced at the cursor: the same edit elsewhere
SIMILAR_LINE = 0.6  # difflib ratio from which a typed line is taken for an edited version of a replaced one
MAX_LINE_CHARS = 200
MAX_RECALL_HUNKS = 50_000
ACCEPT_WINDOW_S = 10.0  # an accepted completion and its edit belong together within this


@dataclass(frozen=True)
class MemoryEntry:
    """What may go into the prompt."""

    kind: str  # "hunk" | "replaced" | "thought"
    path: str
    start_line: int  # for a hunk; -1 for a thought
    lines: list[str]  # a hunk: removed lines as `was: ...`, then its inserted lines; replaced: the removed lines
    # (as they were, the code the cursor's edit is rewriting); a thought: its text
    text: str  # the rendered text for the prompt (comment-prefixed by the prompt module)
    score: float
    reasons: tuple[str, ...]  # "same file", "overlap 0.42", "related (call)", "recent", "thought"


@dataclass(frozen=True)
class MemoryDecision:
    """SCM's controller, per request."""

    consulted: bool  # False: nothing in the session relates to this cursor (or memory off)
    reason: str
    budget_tokens: int  # tokens the session takes of the prompt
    retrieval_needed: bool  # selective retrieval (kept True unless measured to help)
    entries: tuple[MemoryEntry, ...]


@dataclass
class _Cand:
    kind: str  # "hunk" | "thought"
    obj: Hunk | Thought
    tokens: frozenset[str]
    time: float
    s_ind: float = 0.0
    overlap: float = 0.0
    proximity: float = 0.0
    analog: float = 0.0  # how like the code replaced at the cursor the code this hunk replaced is
    s_env: float = 0.0
    score: float = 0.0
    line: int = 0


def _clean(line: str) -> str:
    line = line.rstrip("\r").rstrip()
    return line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS - 3] + "..."


def render_hunk(hunk: Hunk) -> list[str]:
    """A hunk's lines for the prompt: the replaced lines as `was: ...` (a few), then the inserted ones; a pure
    deletion as `deleted: ...`."""
    out: list[str] = []
    word = "was" if hunk.inserted else "deleted"
    for line in hunk.removed[:MAX_SHOWN_REMOVED]:
        out.append(f"{word}: {_clean(line).strip()}")
    if len(hunk.removed) > MAX_SHOWN_REMOVED:
        out.append(f"{word}: ... ({len(hunk.removed) - MAX_SHOWN_REMOVED} more lines)")
    inserted = [_clean(line) for line in hunk.inserted]
    while inserted and not inserted[0]:
        inserted.pop(0)
    while inserted and not inserted[-1]:
        inserted.pop()
    out.extend(inserted[:MAX_SHOWN_LINES])
    if len(inserted) > MAX_SHOWN_LINES:
        out.append(f"... ({len(inserted) - MAX_SHOWN_LINES} more lines)")
    return out


def summarize_hunk(hunk: Hunk) -> str:
    """A hunk in one line (MemGPT's summary of an evicted event)."""
    changed = next((ln.strip() for ln in hunk.inserted if ln.strip()), "")
    if changed:
        shown = changed if len(changed) <= 60 else changed[:57] + "..."
        what = f"`{shown}`"
    else:
        gone = next((ln.strip() for ln in hunk.removed if ln.strip()), "")
        what = f"deleted `{gone[:57] + '...' if len(gone) > 60 else gone}`"
    counts = f"+{len(hunk.inserted)} -{len(hunk.removed)} lines"
    return f"edited {hunk.path} line {hunk.start_line + 1}: {what} ({counts})"


def prompt_form(entry: MemoryEntry) -> str:
    """An entry as the prompt shows it (header and comment markers), what its tokens are counted on."""
    return RecentSource(entry.kind, entry.path, entry.start_line, tuple(entry.lines)).render()


def replaced_start(hunk: Hunk, line: int) -> int:
    """The index of the removed line that the cursor's line takes the place of: after the removed line most like
    the last line typed, else as many lines down as were typed."""
    typed = [ln.strip() for ln in hunk.inserted[:max(0, line - hunk.start_line)] if ln.strip()]
    start = min(len(typed), len(hunk.removed))
    if typed:
        matcher = difflib.SequenceMatcher(autojunk=False)
        matcher.set_seq2(typed[-1])
        best = 0.0
        for j, ln in enumerate(hunk.removed):
            matcher.set_seq1(_clean(ln).strip())
            if matcher.real_quick_ratio() >= SIMILAR_LINE and matcher.quick_ratio() >= SIMILAR_LINE:
                r = matcher.ratio()
                if r >= SIMILAR_LINE and r > best:
                    best, start = r, j + 1
    return start


def replaced_window(hunk: Hunk, start: int, above: Sequence[str] = ()) -> list[str]:
    """The removed lines of the hunk at the cursor from `replaced_start` on, with `REPLACED_BEFORE` above it. A
    window from the first removed line starts with `above`, the file's last code lines above the hunk (unchanged,
    so also right above the cursor when nothing was typed yet): the anchor a model copies after."""
    first = start - REPLACED_BEFORE
    window = ([_clean(ln) for ln in above[len(above) + first:]] if first < 0 else []) + \
        [_clean(ln) for ln in hunk.removed[max(0, first):]]
    while window and not window[-1].strip():
        window.pop()
    return window[:MAX_SHOWN_LINES]


class SessionMemory:
    """The editing session of one folder: events in, per-request decisions out (see the module docstring)."""

    def __init__(self, root: Path | None, config: MemoryConfig, store: RecallStore | None = None) -> None:
        self.root = root
        self.config = config
        if store is None and root is not None and config.persist and config.enabled:
            store = RecallStore(Path(root), config.store_max_bytes)
        self.store = store if config.persist else None
        self.tracker = HunkTracker(config.max_hunks, config.max_bytes)
        self._thoughts: list[Thought] = []
        self._recall: OrderedDict[int, Hunk] = OrderedDict()  # older hunks, least recent first
        self._recall_tokens: dict[int, frozenset[str]] = {}
        self._recall_bytes = 0
        self._index = MinHashIndex()  # recall hunks ("h", id) and thoughts ("t", key): keys are pairs
        self._thought_tokens: dict[str, tuple[str, frozenset[str]]] = {}  # key -> (text, tokens)
        self._by_name: dict[str, set[str]] = {}  # identifier -> thought keys naming it
        # queue hunks' vectors and non-blank inserted lines, recomputed when they change
        self._hunk_tokens: dict[int, tuple[frozenset[str], tuple[str, ...], frozenset[str]]] = {}  # + removed
        self._clock = 0.0  # the session's latest event time
        self._shown: deque[tuple[str, int, str, float]] = deque(maxlen=64)
        self._pending: deque[tuple[str, int, str, float]] = deque(maxlen=8)  # accepted, edit not seen yet
        self._counts = {"edits": 0, "shown": 0, "accepted": 0}
        if self.store is not None:
            hunks, thoughts = self.store.load()
            for h in hunks:
                self._to_recall(h)
            self._thoughts = thoughts if config.thoughts else []
            self._reindex_thoughts()
            if hunks:
                self.tracker.restore_ids(max(h.id for h in hunks) + 1)
                self._clock = max(h.last_time for h in hunks)
            if self._thoughts:
                self._clock = max(self._clock, max(t.time for t in self._thoughts))

    # -- events --------------------------------------------------------------------------------------------
    def _tick(self, t: float) -> None:
        if math.isfinite(t):
            self._clock = max(self._clock, t)

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
            self._hunk_tokens.pop(tombstone.id, None)
            if self.config.thoughts:
                self._thoughts = think(tombstone, self._thoughts)

    def edited(self, edit: TextEdit) -> None:
        if not self.config.enabled:
            return
        self._tick(edit.time)
        self._counts["edits"] += 1
        changed = self.tracker.apply(edit)
        for hunk in changed:
            self._hunk_tokens.pop(hunk.id, None)
            if hunk.removed or hunk.inserted:
                self._match_accepted(hunk)
            if self.config.thoughts:
                self._thoughts = think(hunk, self._thoughts)
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
            self._hunk_tokens.pop(hunk.id, None)
            self._to_recall(hunk)

    def _to_recall(self, hunk: Hunk) -> None:
        if hunk.id in self._recall:
            self._drop_recall(hunk.id)
        size = hunk_bytes(hunk)
        if size > self.config.store_max_bytes // 4:  # a huge paste: its first lines stand for it
            hunk = Hunk(hunk.id, hunk.path, hunk.start_line, hunk.removed[:MAX_SHOWN_LINES],
                        hunk.inserted[:MAX_SHOWN_LINES], hunk.first_time, hunk.last_time, hunk.source)
            size = hunk_bytes(hunk)
            if size > self.config.store_max_bytes // 4:
                return
        self._recall[hunk.id] = hunk
        self._recall_bytes += size
        tokens = memory_tokens("\n".join(hunk.removed + hunk.inserted))
        self._recall_tokens[hunk.id] = tokens
        self._index.add(("h", hunk.id), tokens)
        while self._recall and (self._recall_bytes > self.config.store_max_bytes
                                or len(self._recall) > MAX_RECALL_HUNKS):
            self._drop_recall(next(iter(self._recall)))

    def _drop_recall(self, hunk_id: int) -> None:
        hunk = self._recall.pop(hunk_id)
        self._recall_bytes -= hunk_bytes(hunk)
        self._recall_tokens.pop(hunk_id, None)
        self._index.remove(("h", hunk_id))

    def _reindex_thoughts(self) -> None:
        live = {t.key: t for t in self._thoughts if visible(t)}
        for key in [k for k in self._thought_tokens if k not in live]:
            _, tokens = self._thought_tokens.pop(key)
            self._index.remove(("t", key))
            for name in tokens:
                keys = self._by_name.get(name)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del self._by_name[name]
        for key, t in live.items():
            old = self._thought_tokens.get(key)
            if old is not None and old[0] == t.text:
                continue
            if old is not None:
                for name in old[1]:
                    self._by_name.get(name, set()).discard(key)
            tokens = memory_tokens(_thought_words(t))
            self._thought_tokens[key] = (t.text, tokens)
            self._index.add(("t", key), tokens)
            for name in tokens:
                self._by_name.setdefault(name, set()).add(key)

    def hunks(self) -> list[Hunk]:
        """The queue's hunks, oldest first (recall storage's older ones are not among them)."""
        return self.tracker.hunks()

    def thoughts(self) -> list[Thought]:
        """The thoughts worth showing (a repeated shape once it is in two places), oldest first."""
        return [t for t in self._thoughts if visible(t)]

    # -- the controller ------------------------------------------------------------------------------------
    def select(self, path: str, line: int, prefix_lines: list[str], budget_tokens: int,
               count_tokens: Callable[[str], int],
               relation: Callable[[str, int, str, int], float] | None = None) -> MemoryDecision:
        cfg = self.config
        if not cfg.enabled:
            return MemoryDecision(False, "session memory is off", 0, True, ())
        if budget_tokens <= 0 or cfg.max_entries <= 0:
            return MemoryDecision(False, "no prompt budget for the session", 0, True, ())
        now = self._clock
        queue = self.tracker.hunks()
        thoughts = [t for t in self._thoughts if visible(t)]
        if not queue and not self._recall and not thoughts:
            return MemoryDecision(False, "nothing edited in this session yet", 0, True, ())

        query = memory_tokens("\n".join(prefix_lines[-cfg.query_lines:]))
        shown_lines = {s for s in (ln.strip() for ln in prefix_lines) if s}
        cands: list[_Cand] = []
        hunk_cands: set[int] = set()

        recent_ids = {h.id for h in queue[-RECENT_RELATED:]} if relation is not None else set()
        qn = len(query)
        pool: list[tuple[float, int, float, float, float, Hunk, frozenset[str], tuple[str, ...]]] = []
        replaced = self._replaced_at(path, line, queue, now) if cfg.replaced else None
        replaced_from = replaced_start(replaced, line) if replaced else 0  # once: the difflib pass is the cost
        replaced_tokens = memory_tokens("\n".join(replaced_window(replaced, replaced_from))) if replaced \
            else frozenset()

        def consider(h: Hunk, tokens: frozenset[str], inserted: tuple[str, ...],
                     removed: frozenset[str] = frozenset()) -> None:
            if h.last_time > now or not any(line.strip() for line in h.inserted):
                return  # from the future, or a pure deletion: nothing in it to write again (a rename has a thought)
            analog = jaccard(removed, replaced_tokens) if removed and replaced_tokens and h is not replaced else 0.0
            analog = analog if analog >= ANALOG_MIN else 0.0
            inter = len(tokens & query) if qn and tokens else 0
            overlap = inter / (len(tokens) + qn - inter) if inter else 0.0
            proximity = 0.0
            if h.path == path:
                start, end = h.start_line, h.start_line + max(len(h.inserted), 1)
                dist = 0 if start <= line < end else min(abs(line - start), abs(line - (end - 1)))
                proximity = math.exp(-dist / DISTANCE_SCALE)
            if overlap == 0.0 and proximity < 1e-3 and not analog and h.id not in recent_ids:
                return  # nothing relates it (the graph is asked only about the shortlist and the latest hunks)
            pool.append((overlap + W_PROXIMITY * proximity + analog, h.id, overlap, proximity, analog, h, tokens,
                         inserted))

        for h in queue:
            cached = self._hunk_tokens.get(h.id)
            if cached is None:
                cached = self._hunk_tokens[h.id] = (memory_tokens("\n".join(h.removed + h.inserted)),
                                                    _nonblank(h.inserted), memory_tokens("\n".join(h.removed)))
            consider(h, *cached)

        # recall storage, first stage: the hash buckets (and the cursor's file); second: exact similarity
        keys = self._index.candidates(query, limit=RECALL_CANDIDATES) if query else set()
        recall_ids = [k[1] for k in keys if k[0] == "h"]  # type: ignore[index]
        if len(self._recall) <= 4 * SAME_FILE_RECALL:
            same_file = [h.id for h in reversed(self._recall.values()) if h.path == path][:SAME_FILE_RECALL]
        else:
            same_file = [hid for hid in recall_ids if self._recall[hid].path == path]
        scored = [(jaccard(self._recall_tokens[hid], query), hid) for hid in recall_ids]
        ranked = [hid for _, hid in heapq.nlargest(RECALL_TOP, scored)]
        for hid in dict.fromkeys(ranked + same_file):
            h = self._recall[hid]
            consider(h, self._recall_tokens[hid], _nonblank(h.inserted))

        # the strongest hunks (and the latest, for the graph) become candidates, unless visible already
        top = heapq.nlargest(HUNK_TOP, pool, key=lambda p: (p[0], p[1]))
        top_ids = {p[1] for p in top}
        top += [p for p in pool if p[1] in recent_ids and p[1] not in top_ids]
        for s_ind, _, overlap, proximity, analog, h, tokens, inserted in top:
            if inserted and all(s in shown_lines for s in inserted):
                continue  # shown already: its inserted lines are all in the visible context
            c = _Cand("hunk", h, tokens, h.last_time, s_ind=s_ind, overlap=overlap, proximity=proximity,
                      analog=analog, line=h.start_line)
            cands.append(c)
            hunk_cands.add(h.id)

        thought_keys = {k[1] for k in keys if k[0] == "t"}  # type: ignore[index]
        for name in query:
            thought_keys |= self._by_name.get(name, set())
        for t in thoughts:
            if t.key in thought_keys or hunk_cands.intersection(t.hunk_ids):
                if t.time > now:
                    continue
                tokens = self._thought_tokens.get(t.key, ("", frozenset()))[1]
                c = _Cand("thought", t, tokens, t.time, line=self._thought_line(t))
                c.overlap = len(tokens & query) / len(tokens) if tokens else 0.0
                c.proximity = THOUGHT_FILE if path in t.paths else 0.0
                c.s_ind = c.overlap + W_PROXIMITY * c.proximity
                cands.append(c)
        if not cands and replaced is None:
            return MemoryDecision(False, "every edit of the session is visible in the context already", 0, True, ())

        # FragRel over the session: the shortlist's relations to the cursor and to each other
        rel_reason: dict[int, str] = {}
        if relation is not None and cfg.relations and cfg.alpha > 0:
            by_ind = sorted(range(len(cands)), key=lambda i: -cands[i].s_ind)[:SHORTLIST]
            recent = sorted((i for i in range(len(cands)) if cands[i].kind == "hunk"),
                            key=lambda i: -cands[i].time)[:RECENT_RELATED]
            short = list(dict.fromkeys(by_ind + recent))
            cache: dict[tuple[str, int, str, int], float] = {}

            def rel(a: tuple[str, int], b: tuple[str, int]) -> float:
                k = (a[0], a[1], b[0], b[1])
                if k not in cache:
                    try:
                        w = float(relation(a[0], a[1], b[0], b[1]))
                    except Exception:
                        log.debug("memory: relation callback failed", exc_info=True)
                        w = 0.0
                    cache[k] = w if math.isfinite(w) and w > 0 else 0.0
                    cache[(b[0], b[1], a[0], a[1])] = cache[k]
                return min(cache[k], 1.0)

            where = {i: (_path_of(cands[i]), cands[i].line) for i in short}
            for i in short:
                w_c = rel(where[i], (path, line))
                num, den = w_c * 1.0, w_c
                for j in short[:6]:
                    if j != i and i in short[:6]:
                        w = rel(where[i], where[j])
                        num += w * cands[j].s_ind
                        den += w
                cands[i].s_env = num / max(1.0, den)
                if w_c > 0:
                    rel_reason[i] = f"related {w_c:.2f}"
        for c in cands:
            s_rel = c.s_ind + cfg.alpha * c.s_env
            age = max(0.0, now - c.time)
            c.score = s_rel * (0.5 + 0.5 * 0.5 ** (age / cfg.half_life_s))

        order = sorted(range(len(cands)), key=lambda i: (-cands[i].score, -cands[i].time))
        best = cands[order[0]].score if cands else 0.0
        if best < cfg.min_score and replaced is None:
            return MemoryDecision(False, f"nothing in the session relates to this cursor (best score {best:.3f} "
                                  f"< min_score {cfg.min_score})", 0, True, ())
        qualified = [i for i in order if cands[i].score >= cfg.min_score]
        return self._fit(cands, qualified, rel_reason, path, now, budget_tokens, count_tokens,
                         (replaced, replaced_from) if replaced is not None else None)

    def _replaced_at(self, path: str, line: int, queue: list[Hunk], now: float) -> Hunk | None:
        """The latest hunk that replaced code where the cursor is (inside or right after its inserted lines)."""
        for h in reversed(queue):
            if h.path == path and h.start_line <= line <= h.end_line and h.last_time <= now \
                    and any(ln.strip() for ln in h.removed):
                return h
        return None

    def _fit(self, cands: list[_Cand], qualified: list[int], rel_reason: dict[int, str], path: str, now: float,
             budget: int, count_tokens: Callable[[str], int],
             replaced: tuple[Hunk, int] | None = None) -> MemoryDecision:
        """The best entries that fit the budget: the code replaced at the cursor (cut to fit), then full hunks,
        thoughts, or summaries (SCM, MemGPT)."""
        cfg = self.config
        chosen: list[tuple[_Cand, MemoryEntry, int]] = []  # (candidate, entry, tokens)
        if replaced is not None:
            h, start = replaced
            near = self.tracker.lines(h.path, h.start_line - 3 * REPLACED_BEFORE, h.start_line)
            above = [ln for ln in near if ln.strip()][-REPLACED_BEFORE:]
            window, renames = self._renamed(replaced_window(h, start, above), h, now)
            reasons = ("replaced at the cursor",) + tuple(f"renamed as before: {r}" for r in renames)

            def replaced_entry(k: int) -> MemoryEntry:
                return MemoryEntry("replaced", h.path, h.start_line, window[:k], "\n".join(window[:k]), 1.0, reasons)

            lo, hi = 0, len(window)  # the most lines that fit the budget (a few token counts, not one per line)
            while lo < hi:
                mid = (lo + hi + 1) // 2
                lo, hi = (mid, hi) if count_tokens(prompt_form(replaced_entry(mid))) <= budget else (lo, mid - 1)
            if lo:
                chosen.append((_Cand("replaced", h, frozenset(), h.last_time, score=1.0), replaced_entry(lo),
                               count_tokens(prompt_form(replaced_entry(lo)))))
        thought_keys: set[str] = set()
        full_hunks: set[int] = set()
        blocks: set[frozenset[int]] = set()  # hunk sets of the repeated-shape thoughts shown
        by_hunk: dict[int, Thought] = {}
        for t in self._thoughts:
            if visible(t):
                for hid in t.hunk_ids:
                    by_hunk.setdefault(hid, t)
        for i in qualified:
            if len(chosen) >= cfg.max_entries:
                break
            c = cands[i]
            reasons = self._reasons(c, path, now, rel_reason.get(i))
            if isinstance(c.obj, Thought):
                t = c.obj
                if t.key in thought_keys or (t.count == 1 and set(t.hunk_ids) <= full_hunks) \
                        or (t.kind == "repeated" and frozenset(t.hunk_ids) in blocks):
                    continue  # shown already: by its one hunk, or as another line of the same repeated block
                if t.kind == "repeated":
                    blocks.add(frozenset(t.hunk_ids))
                entry = _thought_entry(t.paths[-1], t.text, c.score, reasons)
                thought_keys.add(t.key)
            else:
                h = c.obj
                assert isinstance(h, Hunk)
                entry = _hunk_entry(h, c.score, reasons)
                share = 1 - FULL_SHARE if c.analog else FULL_SHARE  # the same edit elsewhere: its text is the point
                if count_tokens(prompt_form(entry)) > budget * share:  # SCM: the summary is enough
                    own = by_hunk.get(h.id)
                    if own is not None and own.key not in thought_keys:
                        entry = _thought_entry(h.path, own.text, c.score, reasons + ("thought of a long hunk",))
                        thought_keys.add(own.key)
                    else:
                        entry = _thought_entry(h.path, summarize_hunk(h), c.score, reasons + ("summary",))
                else:
                    full_hunks.add(h.id)
            chosen.append((c, entry, count_tokens(prompt_form(entry))))
        if not chosen:
            return MemoryDecision(False, "the related entries are shown already", 0, True, ())

        # MemGPT under memory pressure: the oldest full hunks leave for their summaries, then the weakest entries
        total = sum(n for _, _, n in chosen)
        while total > budget and chosen:
            full = [k for k, (c, e, _) in enumerate(chosen) if e.kind == "hunk"]
            if full:
                k = min(full, key=lambda k: chosen[k][0].time)
                c, e, _ = chosen[k]
                assert isinstance(c.obj, Hunk)
                summary = _thought_entry(e.path, summarize_hunk(c.obj), e.score, e.reasons + ("summary",))
                chosen[k] = (c, summary, count_tokens(prompt_form(summary)))
            else:
                chosen.pop()  # the weakest (they are in score order)
            total = sum(n for _, _, n in chosen)
        if not chosen:
            return MemoryDecision(False, f"no related entry fits the session's budget of {budget} tokens", 0, True,
                                  ())
        entries = tuple(e for _, e, _ in chosen)
        kinds = sum(1 for e in entries if e.kind == "hunk"), sum(1 for e in entries if e.kind == "thought")
        what = f"{kinds[0]} hunk(s) and {kinds[1]} thought(s) relate to this cursor"
        if entries[0].kind == "replaced":
            what = f"the code replaced at the cursor ({len(entries[0].lines)} lines); " + what
        return MemoryDecision(True, f"{what} (best score {entries[0].score:.3f})", total, True, entries)

    def _renamed(self, lines: list[str], hunk: Hunk, now: float) -> tuple[list[str], list[str]]:
        """TiM's thoughts applied to the code being rewritten: each rename the session made elsewhere (oldest
        first, so chains follow) made in `lines` too, as the developer is likely to again; and which applied."""
        applied: list[str] = []
        for t in self._thoughts:
            if t.kind != "rename" or not visible(t) or t.time > now or hunk.id in t.hunk_ids:
                continue
            old, new = t.key.split(":", 1)[1].split("->", 1)
            word = re.compile(rf"(?<!\w){re.escape(old)}(?!\w)")
            if any(word.search(ln) for ln in lines):
                lines = [word.sub(new.replace("\\", "\\\\"), ln) for ln in lines]  # `new` taken literally
                applied.append(f"`{old}` -> `{new}`")
        return lines, applied

    def _reasons(self, c: _Cand, path: str, now: float, related: str | None) -> tuple[str, ...]:
        out = []
        if c.proximity > 0 and (isinstance(c.obj, Thought) or c.obj.path == path):
            out.append("same file")
        if c.overlap > 0:
            out.append(f"overlap {c.overlap:.2f}")
        if c.analog > 0:
            out.append(f"replaced like the cursor's code {c.analog:.2f}")
        if related:
            out.append(related)
        if now - c.time <= self.config.half_life_s:
            out.append("recent")
        if c.kind == "thought":
            out.append("thought")
        return tuple(out)

    def _thought_line(self, t: Thought) -> int:
        for hid in reversed(t.hunk_ids):
            h = self.tracker.get(hid) or self._recall.get(hid)
            if h is not None:
                return h.start_line
        return 0

    # -- persistence and upkeep ----------------------------------------------------------------------------
    def save(self) -> None:
        """Write the whole history (queue and recall storage) and the thoughts to the recall storage file."""
        if self.store is None:
            return
        hunks = list(self._recall.values()) + self.tracker.hunks()
        self.store.save(hunks, self._thoughts)

    def clear(self) -> None:
        """Forget the session: the queue, recall storage (and its file) and the thoughts (open files stay)."""
        self.tracker.clear()
        self._thoughts = []
        self._reindex_thoughts()
        for hid in list(self._recall):
            self._drop_recall(hid)
        self._hunk_tokens.clear()
        self._pending.clear()
        self._shown.clear()
        if self.store is not None:
            self.store.clear()

    def stats(self) -> dict[str, int]:
        return {"hunks": len(self.tracker.hunks()), "hunk_bytes": self.tracker.bytes,
                "recall_hunks": len(self._recall), "recall_bytes": self._recall_bytes,
                "thoughts": len(self.thoughts()), "latent_thoughts": len(self._thoughts) - len(self.thoughts()),
                "edits": self._counts["edits"], "shown": self._counts["shown"],
                "accepted": self._counts["accepted"]}


def _nonblank(lines: list[str]) -> tuple[str, ...]:
    """A hunk's inserted lines as compared with the visible context: stripped, blank ones left out (a deletion
    has none, and is never taken for visible)."""
    return tuple(s for s in (ln.strip() for ln in lines) if s)


def _path_of(c: _Cand) -> str:
    if c.kind == "hunk":
        return c.obj.path  # type: ignore[union-attr]
    return c.obj.paths[-1]  # type: ignore[union-attr]


def _thought_words(t: Thought) -> str:
    """The text a thought's vector is made of: the code it names (in backquotes) and its key, not its English."""
    code = re.findall(r"`([^`]*)`", t.text)
    key = t.key.split(":", 1)[1] if t.kind != "repeated" else ""
    return " ".join(code) + " " + key.replace("->", " ")


def _hunk_entry(h: Hunk, score: float, reasons: tuple[str, ...]) -> MemoryEntry:
    lines = render_hunk(h)
    return MemoryEntry("hunk", h.path, h.start_line, lines, "\n".join(lines), score, reasons)


def _thought_entry(path: str, text: str, score: float, reasons: tuple[str, ...]) -> MemoryEntry:
    return MemoryEntry("thought", path, -1, [text], text, score, reasons)
