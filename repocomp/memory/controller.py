"""SCM's controller over a folder's session memory (`repocomp.memory.session`): per completion request, what the
prompt shows of the session, and why.

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
   eviction into a summary), and past that the weakest entry leaves. A hunk's summary is the model's recursive
   summary of the session when it folds that hunk (`[memory] summaries`, `repocomp.memory.summaries`; shown once
   per prompt, and last whenever it folds a hunk not shown in full: the head of MemGPT's queue), else a one-line
   template.
   The controller decides the session's part of the prompt only: whether to retrieve from the repository at all
   (SCM's and Repoformer's selective retrieval) is not decided here. The decision's `budget_tokens` is what the
   entries take (as the prompt shows them: header and comment markers counted).
"""

from __future__ import annotations

import difflib
import heapq
import logging
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from repocomp.memory.hunks import Hunk
from repocomp.memory.recall import jaccard, memory_tokens
from repocomp.memory.thoughts import Thought, visible
from repocomp.prompt.layout import RecentSource

if TYPE_CHECKING:
    from repocomp.memory.session import SessionMemory

__all__ = ["Controller", "MemoryDecision", "MemoryEntry", "prompt_form", "render_hunk", "summarize_hunk"]

log = logging.getLogger(__name__)

W_PROXIMITY = 0.3  # weight of the distance in lines (same file) beside the token overlap
DISTANCE_SCALE = 40.0  # lines: proximity exp(-distance / scale)
THOUGHT_FILE = 0.5  # a thought about the cursor's file: its proximity
SHORTLIST = 8  # entries whose relations (to the cursor and each other) are asked of the graph
RELATED_PEERS = 6  # the first shortlisted entries whose relations to each other count (FragRel's s_env)
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
    entries: tuple[MemoryEntry, ...]


@dataclass
class _Cand:
    """An entry scored for a request: a hunk or a thought (or the code replaced at the cursor, chosen first)."""

    kind: str  # "hunk" | "thought" | "replaced" | "summary" (the model's, of the hunk `obj` and earlier ones)
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


class HunkVectors(NamedTuple):
    """What a hunk is compared by: its identifiers, its non-blank inserted lines, its removed lines' identifiers."""

    tokens: frozenset[str]  # of the removed and inserted lines
    inserted: tuple[str, ...]  # stripped, blank ones left out (`_nonblank`): compared with the visible context
    removed: frozenset[str]  # of the removed lines (a recall hunk: none, it is never an analog)


class _Pooled(NamedTuple):
    """A hunk through the cheap first pass, ranked by (s_ind, hunk_id)."""

    s_ind: float  # overlap + W_PROXIMITY * proximity + analog
    hunk_id: int
    overlap: float
    proximity: float
    analog: float
    hunk: Hunk
    tokens: frozenset[str]
    inserted: tuple[str, ...]


@dataclass(frozen=True)
class _Request:
    """One completion request, and the session's state it is answered from."""

    path: str
    line: int
    now: float  # the session's clock: nothing later is a candidate
    queue: list[Hunk]
    thoughts: list[Thought]  # the visible ones
    query: frozenset[str]  # the identifiers of the last `query_lines` lines before the cursor
    shown_lines: frozenset[str]  # the non-blank lines before the cursor, stripped
    recent_ids: frozenset[int]  # the latest queue hunks, always asked about (with a relation callback)
    replaced: Hunk | None  # the hunk at the cursor that replaced code
    replaced_from: int  # `replaced_start` of it
    replaced_tokens: frozenset[str]  # the identifiers of its `replaced_window`


class _Chosen(NamedTuple):
    """An entry on its way into the prompt: its candidate, the entry, and the tokens the entry takes."""

    cand: _Cand
    entry: MemoryEntry
    tokens: int


@dataclass
class _Shown:
    """What the entries chosen so far show, so that nothing is shown twice."""

    thought_keys: set[str] = field(default_factory=set)
    full_hunks: set[int] = field(default_factory=set)
    blocks: set[frozenset[int]] = field(default_factory=set)  # hunk sets of the repeated-shape thoughts shown
    model_summary: bool = False  # the model's summary of the session is shown (it folds many hunks)


class _Relations:
    """The `relation` callback, asked once per pair of places (either order); its answer a finite strength, at
    most 1 (a failing callback or a bad value: 0)."""

    def __init__(self, relation: Callable[[str, int, str, int], float]) -> None:
        self._relation = relation
        self._cache: dict[tuple[str, int, str, int], float] = {}

    def __call__(self, a: tuple[str, int], b: tuple[str, int]) -> float:
        k = (a[0], a[1], b[0], b[1])
        if k not in self._cache:
            try:
                w = float(self._relation(a[0], a[1], b[0], b[1]))
            except Exception:
                log.debug("memory: relation callback failed", exc_info=True)
                w = 0.0
            self._cache[k] = w if math.isfinite(w) and w > 0 else 0.0
            self._cache[(b[0], b[1], a[0], a[1])] = self._cache[k]
        return min(self._cache[k], 1.0)


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
    """A hunk in one line, from a template: what stands for it while the model's summary does not fold it."""
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


class Controller:
    """SCM's controller over one session memory: its candidates, their scores, the entries that fit the budget."""

    def __init__(self, memory: SessionMemory) -> None:
        self.memory = memory

    # -- the controller ------------------------------------------------------------------------------------
    def select(self, path: str, line: int, prefix_lines: list[str], budget_tokens: int,
               count_tokens: Callable[[str], int],
               relation: Callable[[str, int, str, int], float] | None = None) -> MemoryDecision:
        """SCM's controller (see the module docstring): the candidates, their scores, what fits the budget."""
        cfg = self.memory.config
        if not cfg.enabled:
            return _not_consulted("session memory is off")
        if budget_tokens <= 0 or cfg.max_entries <= 0:
            return _not_consulted("no prompt budget for the session")
        req = self._request(path, line, prefix_lines, with_recent=relation is not None)
        if not req.queue and not self.memory.recall and not req.thoughts:
            return _not_consulted("nothing edited in this session yet")
        cands = self._candidates(req)
        if not cands and req.replaced is None:
            return _not_consulted("every edit of the session is visible in the context already")
        rel_reason = self._relate(cands, req, relation)
        order = self._rank(cands, req.now)
        best = cands[order[0]].score if cands else 0.0
        if best < cfg.min_score and req.replaced is None:
            return _not_consulted(f"nothing in the session relates to this cursor (best score {best:.3f} "
                                  f"< min_score {cfg.min_score})")
        qualified = [i for i in order if cands[i].score >= cfg.min_score]
        return self._fit(cands, qualified, rel_reason, req, budget_tokens, count_tokens)

    def _request(self, path: str, line: int, prefix_lines: list[str], with_recent: bool) -> _Request:
        """The request's query, what it shows already, and the hunk at the cursor that replaced code."""
        now = self.memory.clock
        queue = self.memory.tracker.hunks()
        replaced = self._replaced_at(path, line, queue, now) if self.memory.config.replaced else None
        replaced_from = replaced_start(replaced, line) if replaced else 0  # once: the difflib pass is the cost
        return _Request(
            path=path, line=line, now=now, queue=queue,
            thoughts=[t for t in self.memory.all_thoughts if visible(t)],
            query=memory_tokens("\n".join(prefix_lines[-self.memory.config.query_lines:])),
            shown_lines=frozenset(s for s in (ln.strip() for ln in prefix_lines) if s),
            recent_ids=frozenset(h.id for h in queue[-RECENT_RELATED:]) if with_recent else frozenset(),
            replaced=replaced, replaced_from=replaced_from,
            replaced_tokens=memory_tokens("\n".join(replaced_window(replaced, replaced_from))) if replaced
            else frozenset())

    def _replaced_at(self, path: str, line: int, queue: list[Hunk], now: float) -> Hunk | None:
        """The latest hunk that replaced code where the cursor is (inside or right after its inserted lines)."""
        for h in reversed(queue):
            if h.path == path and h.start_line <= line <= h.end_line and h.last_time <= now \
                    and any(ln.strip() for ln in h.removed):
                return h
        return None

    # -- 1. candidates ---------------------------------------------------------------------------------------
    def _candidates(self, req: _Request) -> list[_Cand]:
        """The hunks (queue and recall storage) and the thoughts that may relate to the request, scored `s_ind`."""
        keys = self.memory.recall_index.candidates(req.query, limit=RECALL_CANDIDATES) if req.query else set()
        recall_ids = [hid for kind, hid in keys if kind == "h" and isinstance(hid, int)]
        pool = self._queue_pool(req) + self._recall_pool(req, recall_ids)
        hunks = _hunk_candidates(pool, req)
        bucketed = {key for kind, key in keys if kind == "t" and isinstance(key, str)}
        return hunks + self._thought_candidates(req, bucketed, {c.obj.id for c in hunks if isinstance(c.obj, Hunk)})

    def _queue_pool(self, req: _Request) -> list[_Pooled]:
        """Every queue hunk that something relates to the request (its vectors cached until it changes)."""
        pool = []
        for h in req.queue:
            vectors = self.memory.hunk_vectors.get(h.id)
            if vectors is None:
                vectors = self.memory.hunk_vectors[h.id] = HunkVectors(
                    memory_tokens("\n".join(h.removed + h.inserted)), _nonblank(h.inserted),
                    memory_tokens("\n".join(h.removed)))
            pooled = _pooled(h, vectors, req)
            if pooled is not None:
                pool.append(pooled)
        return pool

    def _recall_pool(self, req: _Request, recall_ids: list[int]) -> list[_Pooled]:
        """Recall storage, TiM's two stages: the hunks sharing a hash bucket with the query (`recall_ids`), the
        `RECALL_TOP` most similar of them by the exact Jaccard similarity; and those of the cursor's file."""
        if len(self.memory.recall) <= 4 * SAME_FILE_RECALL:
            same_file = [h.id for h in reversed(self.memory.recall.values()) if h.path == req.path][:SAME_FILE_RECALL]
        else:
            same_file = [hid for hid in recall_ids if self.memory.recall[hid].path == req.path]
        scored = [(jaccard(self.memory.recall_tokens[hid], req.query), hid) for hid in recall_ids]
        ranked = [hid for _, hid in heapq.nlargest(RECALL_TOP, scored)]
        pool = []
        for hid in dict.fromkeys(ranked + same_file):
            h = self.memory.recall[hid]
            pooled = _pooled(h, HunkVectors(self.memory.recall_tokens[hid], _nonblank(h.inserted), frozenset()), req)
            if pooled is not None:
                pool.append(pooled)
        return pool

    def _thought_candidates(self, req: _Request, bucketed: set[str], hunk_ids: set[int]) -> list[_Cand]:
        """The thoughts sharing a hash bucket with the query (`bucketed`), naming a query identifier or supported
        by a candidate hunk (`hunk_ids`), none from the future."""
        keys = set(bucketed)
        for name in req.query:
            keys |= self.memory.thoughts_by_name.get(name, set())
        out = []
        for t in req.thoughts:
            if t.key in keys or hunk_ids.intersection(t.hunk_ids):
                if t.time > req.now:
                    continue  # from the future
                tokens = self.memory.thought_tokens.get(t.key, ("", frozenset()))[1]
                c = _Cand("thought", t, tokens, t.time, line=self._thought_line(t))
                c.overlap = len(tokens & req.query) / len(tokens) if tokens else 0.0
                c.proximity = THOUGHT_FILE if req.path in t.paths else 0.0
                c.s_ind = c.overlap + W_PROXIMITY * c.proximity
                out.append(c)
        return out

    # -- 2. scores -------------------------------------------------------------------------------------------
    def _relate(self, cands: list[_Cand], req: _Request,
                relation: Callable[[str, int, str, int], float] | None) -> dict[int, str]:
        """FragRel over the session: each shortlisted candidate's `s_env` from its relations to the cursor and to
        the other shortlisted ones; the reason ("related 0.42") of those related to the cursor, by index."""
        cfg = self.memory.config
        if relation is None or not (cfg.relations and cfg.alpha > 0):
            return {}
        rel = _Relations(relation)
        short = _shortlist(cands)
        peers = short[:RELATED_PEERS]
        where = {i: (_path_of(cands[i]), cands[i].line) for i in short}
        rel_reason: dict[int, str] = {}
        for i in short:
            w_c = rel(where[i], (req.path, req.line))
            num, den = w_c * 1.0, w_c
            if i in peers:
                for j in peers:
                    if j != i:
                        w = rel(where[i], where[j])
                        num += w * cands[j].s_ind
                        den += w
            cands[i].s_env = num / max(1.0, den)
            if w_c > 0:
                rel_reason[i] = f"related {w_c:.2f}"
        return rel_reason

    def _rank(self, cands: list[_Cand], now: float) -> list[int]:
        """Each candidate's score (`s_rel` times its recency); their indexes, best first (then the latest)."""
        cfg = self.memory.config
        for c in cands:
            s_rel = c.s_ind + cfg.alpha * c.s_env
            age = max(0.0, now - c.time)
            c.score = s_rel * (0.5 + 0.5 * 0.5 ** (age / cfg.half_life_s))
        return sorted(range(len(cands)), key=lambda i: (-cands[i].score, -cands[i].time))

    # -- 3. decision -----------------------------------------------------------------------------------------
    def _fit(self, cands: list[_Cand], qualified: list[int], rel_reason: dict[int, str], req: _Request,
             budget: int, count_tokens: Callable[[str], int]) -> MemoryDecision:
        """The best entries that fit the budget: the code replaced at the cursor (cut to fit), then full hunks,
        thoughts, or summaries (SCM, MemGPT)."""
        chosen: list[_Chosen] = []
        if req.replaced is not None:
            replaced = self._replaced_entry(req.replaced, req.replaced_from, req.now, budget, count_tokens)
            if replaced is not None:
                chosen.append(replaced)
        shown = self._choose(chosen, cands, qualified, rel_reason, req, budget, count_tokens)
        if not chosen:
            return _not_consulted("the related entries are shown already")
        self._head_with_summary(chosen, shown, count_tokens)
        total = _evict(chosen, budget, count_tokens, self._summary_of)
        if not chosen:
            return _not_consulted(f"no related entry fits the session's budget of {budget} tokens")
        return _consulted(tuple(ch.entry for ch in chosen), total)

    def _replaced_entry(self, h: Hunk, start: int, now: float, budget: int,
                        count_tokens: Callable[[str], int]) -> _Chosen | None:
        """The code the cursor's edit is rewriting, from `start` on (the session's renames applied), as many of its
        lines as fit the budget; None when not even one does."""
        near = self.memory.tracker.lines(h.path, h.start_line - 3 * REPLACED_BEFORE, h.start_line)
        above = [ln for ln in near if ln.strip()][-REPLACED_BEFORE:]
        window, renames = self._renamed(replaced_window(h, start, above), h, now)
        reasons = ("replaced at the cursor",) + tuple(f"renamed as before: {r}" for r in renames)

        def entry(k: int) -> MemoryEntry:
            return MemoryEntry("replaced", h.path, h.start_line, window[:k], "\n".join(window[:k]), 1.0, reasons)

        fits = _most_that_fit(len(window), lambda k: count_tokens(prompt_form(entry(k))) <= budget)
        if not fits:
            return None
        return _Chosen(_Cand("replaced", h, frozenset(), h.last_time, score=1.0), entry(fits),
                       count_tokens(prompt_form(entry(fits))))

    def _choose(self, chosen: list[_Chosen], cands: list[_Cand], qualified: list[int], rel_reason: dict[int, str],
                req: _Request, budget: int, count_tokens: Callable[[str], int]) -> _Shown:
        """Append to `chosen`, up to `max_entries` in all, the qualified candidates in score order, each as its
        entry; a thought shown already (by itself, its one hunk or its repeated block) is left out. What they
        show."""
        shown = _Shown()
        by_hunk = self._thought_by_hunk()
        for i in qualified:
            if len(chosen) >= self.memory.config.max_entries:
                break
            c = cands[i]
            reasons = self._reasons(c, req.path, req.now, rel_reason.get(i))
            if isinstance(c.obj, Thought):
                entry = _thought_choice(c.obj, c.score, reasons, shown)
                if entry is None:
                    continue
            else:
                entry = _hunk_choice(c, c.obj, reasons, shown, by_hunk.get(c.obj.id), budget, count_tokens,
                                     self._summary_of)
                if entry is None:
                    continue
            chosen.append(_Chosen(c, entry, count_tokens(prompt_form(entry))))
        return shown

    def _head_with_summary(self, chosen: list[_Chosen], shown: _Shown, count_tokens: Callable[[str], int]) -> None:
        """MemGPT: the recursive summary heads the queue. When the session is consulted and the model's summary
        folds a hunk the entries do not show in full, it is shown too (last: the first to leave under pressure)."""
        s = self.memory.summary
        if s is None or not s.text or shown.model_summary:
            return
        folded = [h for h in self.memory.tracker.hunks() if s.covers(h) and h.id not in shown.full_hunks]
        if not folded:
            return
        latest = max(folded, key=lambda h: h.last_time)
        entry = _thought_entry(latest.path, s.text, 0.0, ("summary by the model",))
        shown.model_summary = True
        chosen.append(_Chosen(_Cand("summary", latest, frozenset(), latest.last_time), entry,
                              count_tokens(prompt_form(entry))))

    def _summary_of(self, h: Hunk) -> tuple[str, bool]:
        """What stands for a hunk shown as a summary: the model's summary when it folds the hunk as it is now
        (True), else the template (False)."""
        if self.memory.summary is not None and self.memory.summary.covers(h):
            return self.memory.summary.text, True
        return summarize_hunk(h), False

    def _thought_by_hunk(self) -> dict[int, Thought]:
        """The first visible thought of each hunk (what a hunk too long to show stands as)."""
        by_hunk: dict[int, Thought] = {}
        for t in self.memory.all_thoughts:
            if visible(t):
                for hid in t.hunk_ids:
                    by_hunk.setdefault(hid, t)
        return by_hunk

    def _renamed(self, lines: list[str], hunk: Hunk, now: float) -> tuple[list[str], list[str]]:
        """TiM's thoughts applied to the code being rewritten: each rename the session made elsewhere (oldest
        first, so chains follow) made in `lines` too, as the developer is likely to again; and which applied."""
        applied: list[str] = []
        for t in self.memory.all_thoughts:
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
        if now - c.time <= self.memory.config.half_life_s:
            out.append("recent")
        if c.kind == "thought":
            out.append("thought")
        return tuple(out)

    def _thought_line(self, t: Thought) -> int:
        for hid in reversed(t.hunk_ids):
            h = self.memory.tracker.get(hid) or self.memory.recall.get(hid)
            if h is not None:
                return h.start_line
        return 0


def _hunk_entry(h: Hunk, score: float, reasons: tuple[str, ...]) -> MemoryEntry:
    lines = render_hunk(h)
    return MemoryEntry("hunk", h.path, h.start_line, lines, "\n".join(lines), score, reasons)


def _thought_entry(path: str, text: str, score: float, reasons: tuple[str, ...]) -> MemoryEntry:
    return MemoryEntry("thought", path, -1, [text], text, score, reasons)


def _not_consulted(reason: str) -> MemoryDecision:
    return MemoryDecision(False, reason, 0, ())


def _consulted(entries: tuple[MemoryEntry, ...], total: int) -> MemoryDecision:
    kinds = sum(1 for e in entries if e.kind == "hunk"), sum(1 for e in entries if e.kind == "thought")
    what = f"{kinds[0]} hunk(s) and {kinds[1]} thought(s) relate to this cursor"
    if entries[0].kind == "replaced":
        what = f"the code replaced at the cursor ({len(entries[0].lines)} lines); " + what
    return MemoryDecision(True, f"{what} (best score {entries[0].score:.3f})", total, entries)


def _nonblank(lines: list[str]) -> tuple[str, ...]:
    """A hunk's inserted lines as compared with the visible context: stripped, blank ones left out (a deletion
    has none, and is never taken for visible)."""
    return tuple(s for s in (ln.strip() for ln in lines) if s)


def _pooled(h: Hunk, vectors: HunkVectors, req: _Request) -> _Pooled | None:
    """A hunk's first-pass score (overlap with the query, proximity to the cursor, analog of the code replaced at
    it); None when nothing relates it, it comes from the future, or it only deleted lines."""
    if h.last_time > req.now or not any(line.strip() for line in h.inserted):
        return None  # from the future, or a pure deletion: nothing in it to write again (a rename has a thought)
    tokens, inserted, removed = vectors
    analog = jaccard(removed, req.replaced_tokens) if removed and req.replaced_tokens and h is not req.replaced \
        else 0.0
    analog = analog if analog >= ANALOG_MIN else 0.0
    query, qn = req.query, len(req.query)
    inter = len(tokens & query) if qn and tokens else 0
    overlap = inter / (len(tokens) + qn - inter) if inter else 0.0
    proximity = _proximity(h, req.path, req.line)
    if overlap == 0.0 and proximity < 1e-3 and not analog and h.id not in req.recent_ids:
        return None  # nothing relates it (the graph is asked only about the shortlist and the latest hunks)
    return _Pooled(overlap + W_PROXIMITY * proximity + analog, h.id, overlap, proximity, analog, h, tokens, inserted)


def _proximity(h: Hunk, path: str, line: int) -> float:
    """`exp(-distance / DISTANCE_SCALE)` from the cursor to the hunk's inserted lines in the cursor's file, else 0."""
    if h.path != path:
        return 0.0
    start, end = h.start_line, h.start_line + max(len(h.inserted), 1)
    dist = 0 if start <= line < end else min(abs(line - start), abs(line - (end - 1)))
    return math.exp(-dist / DISTANCE_SCALE)


def _hunk_candidates(pool: list[_Pooled], req: _Request) -> list[_Cand]:
    """The `HUNK_TOP` strongest pooled hunks, and the latest (for the graph), unless visible already."""
    top = heapq.nlargest(HUNK_TOP, pool, key=lambda p: (p.s_ind, p.hunk_id))
    top_ids = {p.hunk_id for p in top}
    top += [p for p in pool if p.hunk_id in req.recent_ids and p.hunk_id not in top_ids]
    return [_Cand("hunk", p.hunk, p.tokens, p.hunk.last_time, s_ind=p.s_ind, overlap=p.overlap,
                  proximity=p.proximity, analog=p.analog, line=p.hunk.start_line)
            for p in top
            if not (p.inserted and all(s in req.shown_lines for s in p.inserted))]  # shown: all its lines visible


def _shortlist(cands: list[_Cand]) -> list[int]:
    """The candidates whose relations are asked of the graph: the `SHORTLIST` best by s_ind, then the
    `RECENT_RELATED` latest hunks (indexes into `cands`)."""
    by_ind = sorted(range(len(cands)), key=lambda i: -cands[i].s_ind)[:SHORTLIST]
    recent = sorted((i for i in range(len(cands)) if cands[i].kind == "hunk"),
                    key=lambda i: -cands[i].time)[:RECENT_RELATED]
    return list(dict.fromkeys(by_ind + recent))


def _most_that_fit(n: int, fits: Callable[[int], bool]) -> int:
    """The largest k in [0, n] with `fits(k)` (`fits` monotone; a few calls, not one per k)."""
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


def _thought_choice(t: Thought, score: float, reasons: tuple[str, ...], shown: _Shown) -> MemoryEntry | None:
    """A thought's entry; None when shown already: by itself, by its one hunk in full, or as another line of the
    same repeated block."""
    if t.key in shown.thought_keys or (t.count == 1 and set(t.hunk_ids) <= shown.full_hunks) \
            or (t.kind == "repeated" and frozenset(t.hunk_ids) in shown.blocks):
        return None
    if t.kind == "repeated":
        shown.blocks.add(frozenset(t.hunk_ids))
    shown.thought_keys.add(t.key)
    return _thought_entry(t.paths[-1], t.text, score, reasons)


def _hunk_choice(c: _Cand, h: Hunk, reasons: tuple[str, ...], shown: _Shown, own: Thought | None, budget: int,
                 count_tokens: Callable[[str], int],
                 summary_of: Callable[[Hunk], tuple[str, bool]]) -> MemoryEntry | None:
    """A hunk's entry: in full, or, when that takes over its share of the budget (SCM: the summary is enough), its
    own thought (`own`, unless shown) or its summary; None when that is the model's summary, shown already."""
    entry = _hunk_entry(h, c.score, reasons)
    share = 1 - FULL_SHARE if c.analog else FULL_SHARE  # the same edit elsewhere: its text is the point
    if count_tokens(prompt_form(entry)) > budget * share:
        if own is not None and own.key not in shown.thought_keys:
            shown.thought_keys.add(own.key)
            return _thought_entry(h.path, own.text, c.score, reasons + ("thought of a long hunk",))
        text, by_model = summary_of(h)
        if by_model and shown.model_summary:
            return None
        shown.model_summary |= by_model
        return _thought_entry(h.path, text, c.score, reasons + ("summary by the model" if by_model else "summary",))
    shown.full_hunks.add(h.id)
    return entry


def _evict(chosen: list[_Chosen], budget: int, count_tokens: Callable[[str], int],
           summary_of: Callable[[Hunk], tuple[str, bool]]) -> int:
    """MemGPT under memory pressure: while `chosen` takes more than the budget, its oldest full hunk becomes its
    summary (leaves, when that is the model's summary and shown already) and, when none is left, the weakest entry
    leaves (in place); the tokens the rest take."""
    total = sum(ch.tokens for ch in chosen)
    while total > budget and chosen:
        full = [k for k, ch in enumerate(chosen) if ch.entry.kind == "hunk"]
        if full:
            k = min(full, key=lambda k: chosen[k].cand.time)
            c, e = chosen[k].cand, chosen[k].entry
            assert isinstance(c.obj, Hunk)
            text, by_model = summary_of(c.obj)
            if by_model and any(ch.entry.text == text and ch.entry.kind == "thought" for ch in chosen):
                chosen.pop(k)
            else:
                summary = _thought_entry(e.path, text, e.score,
                                         e.reasons + ("summary by the model" if by_model else "summary",))
                chosen[k] = _Chosen(c, summary, count_tokens(prompt_form(summary)))
        else:
            chosen.pop()  # the weakest (they are in score order)
        total = sum(ch.tokens for ch in chosen)
    return total


def _path_of(c: _Cand) -> str:
    return c.obj.path if isinstance(c.obj, Hunk) else c.obj.paths[-1]
