"""Query text -> ranked fragments: sparse similarity, leak rule, FragRel and the query-side relation term.

Leak rule (RepoCoder): a fragment is excluded when *all* its locations are in the hole's file and reach past the
prompt's start line (end_line > prompt_start); fragments wholly above the prompt, or found in any other file,
stay. Removed fragment ids are never returned.

FragRel's environment (Eq. 9) also hears the hole's file's windows wholly before the cursor: excluded from the
prompt by the leak rule, they still lend their similarity to the fragments they relate to (see scoring.py).

Query-side relations (beyond the paper): the lines just before the cursor are themselves nodes of the code graph;
with weight w > 0, `s_rel += w * strength(region, candidate)`, the strongest max-product path from the region
[max(0, cursor_line - window), cursor_line) of the hole's file to a node of the candidate (a definition the
region calls directly scores the call weight, 0.8). The code from the cursor on is never used.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from repocomp.config import Config
from repocomp.fragments import Location
from repocomp.scoring import fragrel_scores

if TYPE_CHECKING:
    from repocomp.index import Index

__all__ = ["Hit", "Retriever", "RetrievalResult", "LocationTable"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Hit:
    fragment_id: int
    s_ind: float
    s_env: float
    s_rel: float
    location: Location  # the location shown to the model (not one that is past the prompt in the hole's file)
    locations: tuple[Location, ...]


@dataclass
class RetrievalResult:
    hits: list[Hit]
    excluded: np.ndarray  # fragment ids removed by the leak rule for this request
    timings_ms: dict[str, float] = field(default_factory=dict)


class LocationTable:
    """Every fragment location as flat arrays grouped by path, so the leak rule is array work per request."""

    def __init__(self, fragments: Sequence[Any]) -> None:
        fids: list[int] = []
        pids: list[int] = []
        starts: list[int] = []
        ends: list[int] = []
        self.path_ids: dict[str, int] = {}
        for f in fragments:  # one pass when the fragment set changes, never per request
            if f is None:
                continue
            for loc in f.locations:
                fids.append(f.id)
                pids.append(self.path_ids.setdefault(loc.path, len(self.path_ids)))
                starts.append(loc.start_line)
                ends.append(loc.end_line)
        pid = np.asarray(pids, np.int32)
        order = np.argsort(pid, kind="stable")
        self.fid = np.asarray(fids, np.int64)[order]
        self.start = np.asarray(starts, np.int64)[order]
        self.end = np.asarray(ends, np.int64)[order]
        self.offsets = np.zeros(len(self.path_ids) + 1, np.int64)
        np.cumsum(np.bincount(pid, minlength=len(self.path_ids)), out=self.offsets[1:])
        n_ids = len(fragments)
        self.n_locations = np.bincount(self.fid, minlength=n_ids) if len(self.fid) else np.zeros(n_ids, np.int64)

    def in_path(self, path: str) -> slice:
        pid = self.path_ids.get(path)
        if pid is None:
            return slice(0, 0)
        return slice(int(self.offsets[pid]), int(self.offsets[pid + 1]))

    def leaked(self, path: str, prompt_start: int) -> np.ndarray:
        """Fragment ids whose every location is in `path` and ends past `prompt_start`."""
        sl = self.in_path(path)
        fid, end = self.fid[sl], self.end[sl]
        past = fid[end > prompt_start]
        if len(past) == 0:
            return past
        ids, counts = np.unique(past, return_counts=True)
        return ids[counts == self.n_locations[ids]]

    def covering(self, path: str, line: int) -> int | None:
        """The fragment whose window in `path` covers `line` and starts latest (the cursor's own fragment)."""
        sl = self.in_path(path)
        start, end = self.start[sl], self.end[sl]
        hit = np.flatnonzero((start <= line) & (line < end))
        if len(hit) == 0:
            return None
        return int(self.fid[sl][hit[np.argmax(start[hit])]])


class Retriever:
    """Ranks an index's fragments for a query; stateless per request apart from the cached location table."""

    def __init__(self, index: "Index", config: Config | None = None) -> None:
        self.index = index
        self.config = config or index.config
        self._table: LocationTable | None = None
        self._table_key: tuple[Any, ...] | None = None
        self._diag_key: tuple[Any, ...] | None = None
        self._diag = True

    def _has_diagonal(self, w: Any) -> bool:
        """Indexes keep W's diagonal zero; check each new matrix once instead of on every request."""
        key = (id(w), getattr(w, "nnz", 0), getattr(w, "shape", None))
        if key != self._diag_key:
            self._diag_key = key
            self._diag = w is not None and w.shape[0] == w.shape[1] and bool(w.diagonal().any())
        return self._diag

    def invalidate(self) -> None:
        """Forget cached fragment locations (call after changing the index's fragments)."""
        self._table = None

    def _key(self, alive: np.ndarray) -> tuple[Any, ...]:
        frags = self.index.fragments
        # Cheap fingerprint of the fragment set: an index `generation` counter when it has one, else sizes.
        return (id(frags), len(frags), int(alive.sum()), getattr(self.index, "generation", None))

    def table(self) -> LocationTable:
        """Fallback for indexes without per-file window lists: all locations as arrays, rebuilt on change."""
        alive = self.index.alive_mask()
        key = self._key(alive)
        if self._table is None or key != self._table_key:
            t0 = time.perf_counter()
            self._table = LocationTable(self.index.fragments)
            self._table_key = key
            log.debug("location table rebuilt in %.1f ms", (time.perf_counter() - t0) * 1e3)
        return self._table

    def _file_fragment_ids(self, path: str) -> list[int] | None:
        """Fragment ids of `path`'s windows when the index keeps per-file window lists (cheap), else None."""
        files = getattr(self.index, "files", None)
        if not isinstance(files, dict):
            return None
        entry = files.get(path)
        return list(getattr(entry, "windows", ())) if entry is not None else []

    def leaked(self, path: str, prompt_start_line: int) -> np.ndarray:
        """Fragment ids excluded by the leak rule for a hole in `path` whose prompt starts at `prompt_start_line`."""
        ids = self._file_fragment_ids(path)
        if ids is None:
            return self.table().leaked(path, prompt_start_line)
        frags = self.index.fragments
        out = [i for i in set(ids) if (f := frags[i]) is not None and f.locations
               and all(loc.path == path and loc.end_line > prompt_start_line for loc in f.locations)]
        return np.asarray(sorted(out), np.int64)

    def before_cursor(self, path: str, cursor_line: int, ids: np.ndarray) -> np.ndarray:
        """Those of `ids` with a window in `path` wholly before `cursor_line` (code written, not code to come)."""
        frags = self.index.fragments
        keep = [i for i in ids.tolist() if (f := frags[i]) is not None
                and any(loc.path == path and loc.end_line <= cursor_line for loc in f.locations)]
        return np.asarray(keep, np.int64)

    def covering(self, path: str, line: int) -> int | None:
        """The fragment whose window in `path` covers `line` and starts latest (the cursor's own fragment)."""
        ids = self._file_fragment_ids(path)
        if ids is None:
            return self.table().covering(path, line)
        best: tuple[int, int] | None = None
        for i in set(ids):
            f = self.index.fragments[i]
            for loc in (f.locations if f is not None else ()):
                if loc.path == path and loc.start_line <= line < loc.end_line and (best is None or loc.start_line > best[0]):
                    best = (loc.start_line, i)
        return None if best is None else best[1]

    def retrieve(self, query: str, *, path: str | None = None, prompt_start_line: int = 0,
                 cursor_line: int | None = None, top_k: int | None = None, alpha: float | None = None,
                 similarity: str | None = None, query_relations: float | None = None) -> RetrievalResult:
        """Top-k fragments for `query`; `path`/`prompt_start_line` apply the leak rule for a hole in `path`."""
        rc = self.config.retrieval
        top_k = rc.top_k if top_k is None else top_k
        alpha = rc.alpha if alpha is None else alpha
        similarity = similarity or rc.similarity
        w_query = rc.query_relations if query_relations is None else query_relations
        timings: dict[str, float] = {}
        t0 = time.perf_counter()
        s_ind = self.index.term_index.score(query, similarity)
        t1 = time.perf_counter()
        timings["similarity"] = (t1 - t0) * 1e3

        # Removed fragments have empty term rows (and no relations): the term index's row mask stands in for
        # index.alive_mask(), which walks every fragment object; hits are re-checked against fragments below.
        n = max(len(s_ind), len(self.index.fragments))
        available = np.zeros(n, bool)
        nonempty = self.index.term_index.nonempty()
        available[: len(nonempty)] = nonempty
        excluded = lenders = np.zeros(0, np.int64)
        if path is not None:
            excluded = self.leaked(path, prompt_start_line)
            available[excluded[excluded < n]] = False
            if cursor_line is not None:
                lenders = self.before_cursor(path, cursor_line, excluded[excluded < n])
        extra = None
        if w_query > 0.0 and path is not None and cursor_line is not None:
            window = self.config.fragments.window
            rel = np.asarray(self.index.region_strength(path, max(0, cursor_line - window), cursor_line), np.float32)
            extra = np.float32(w_query) * rel
        t2 = time.perf_counter()
        timings["leak"] = (t2 - t1) * 1e3

        if len(s_ind) < n:
            s_ind = np.concatenate([s_ind, np.zeros(n - len(s_ind), np.float32)])
        w = self.index.relations
        scores = fragrel_scores(s_ind, w, alpha, available=available, extra=extra,
                                drop_diagonal=self._has_diagonal(w), lenders=lenders)
        t3 = time.perf_counter()
        timings["fragrel"] = (t3 - t2) * 1e3

        hits = self._top(scores.s_ind, scores.s_env, scores.s_rel, available, top_k, path, prompt_start_line)
        timings["rank"] = (time.perf_counter() - t3) * 1e3
        return RetrievalResult(hits=hits, excluded=excluded, timings_ms=timings)

    def _top(self, s_ind: np.ndarray, s_env: np.ndarray, s_rel: np.ndarray, available: np.ndarray, k: int,
             path: str | None, prompt_start: int) -> list[Hit]:
        ranked = np.where(available & (s_rel > 0), s_rel, -np.inf)
        n_ok = int(np.isfinite(ranked).sum())
        k = min(k, n_ok)
        if k <= 0:
            return []
        cand = np.argpartition(-ranked, k - 1)[:k] if k < len(ranked) else np.arange(len(ranked))
        cand = cand[np.isfinite(ranked[cand])]
        cand = cand[np.lexsort((cand, -ranked[cand]))]  # by score, ties by id: deterministic
        hits = []
        for i in cand.tolist():
            frag = self.index.fragments[i]
            if frag is None:  # defensive: alive mask and fragments disagree mid-update
                continue
            locs = tuple(sorted(frag.locations))
            shown = next((loc for loc in locs if loc.path != path or loc.end_line <= prompt_start), locs[0])
            hits.append(Hit(i, float(s_ind[i]), float(s_env[i]), float(s_rel[i]), shown, locs))
        return hits
