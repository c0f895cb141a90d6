"""Query text -> ranked fragments: sparse similarity, leak rule, FragRel and the query-side relation term.

Leak rule (RepoCoder): a fragment is excluded when *all* its locations are in the hole's file and reach past the
prompt's start line (end_line > prompt_start); fragments wholly above the prompt, or found in any other file,
stay. Removed fragment ids are never returned.

FragRel's environment (Eq. 9) also hears the hole's file's windows wholly before the cursor: excluded from the
prompt by the leak rule, they still lend their similarity to the fragments they relate to (see context/scoring.py).

Similar code of another language is not retrieved: a hole in a TypeScript file of a repository with a Go service
gets TypeScript (and JavaScript) fragments, never Go ones (`graph.languages.family_for`; a path of no known
language takes any fragment). FragRel's environment still hears every fragment.

Query-side relations (beyond the paper): the lines just before the cursor are themselves nodes of the code graph;
with weight w > 0, `s_rel += w * strength(region, candidate)`, the strongest max-product path from the region
[max(0, cursor_line - window), cursor_line) of the hole's file to a node of the candidate (a definition the
region calls directly scores the call weight, 0.8). The code from the cursor on is never used.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import scipy.sparse as sp

from graph.languages import family_for
from repocomp.config.schema import Config
from repocomp.context.scoring import SemanticSums, fragrel_scores
from repocomp.context.semantic import SemanticRelations, relations_for
from repocomp.index.fragments import Fragment, Location
from repocomp.index.term_index import TermIndex

if TYPE_CHECKING:
    from repocomp.index import Index
    from repocomp.index.revisions import Revisions
    from repocomp.prompt.cursor import Hole

__all__ = ["Hit", "Retriever", "RetrievalResult", "RetrievalIndex", "draft_query_lines", "next_query", "round_query",
           "session_relation"]

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


class FileWindows(Protocol):
    @property
    def windows(self) -> Sequence[int] | np.ndarray:
        """Fragment id of each of the file's windows, in file order."""
        ...


class RetrievalIndex(Protocol):
    """What the retriever reads of an index: `repocomp.index.Index` implements it (the tests' stand-in too).
    Read-only: the retriever never sets these, so an index may keep them as plain attributes or properties."""

    @property
    def config(self) -> Config: ...

    @property
    def fragments(self) -> Sequence[Fragment | None]:
        """By id; None once removed."""
        ...

    @property
    def files(self) -> Mapping[str, FileWindows]: ...

    @property
    def term_index(self) -> TermIndex: ...

    @property
    def epoch(self) -> int:
        """Compactions so far: fragment ids before one mean nothing after it."""
        ...

    @property
    def revisions(self) -> Revisions:
        """The updates so far and which files they changed."""
        ...

    @property
    def symmetric_relations(self) -> sp.csr_matrix:
        """W of Eq. 9: fragment x fragment relations, w_ij = w_ji."""
        ...

    def region_strength(self, path: str, start_line: int, end_line: int) -> np.ndarray: ...


class Retriever:
    """Ranks an index's fragments for a query; stateless per request."""

    def __init__(self, index: RetrievalIndex, config: Config | None = None,
                 semantic: SemanticRelations | None = None) -> None:
        self.index = index
        self.config = config or index.config
        self._diag_key: tuple[Any, ...] | None = None
        self._diag = True
        self._semantic = semantic  # Eq. 6's relations; made from the local model on first use when None

    def _has_diagonal(self, w: sp.csr_matrix) -> bool:
        """Indexes keep W's diagonal zero; check each new matrix once instead of on every request."""
        key = (id(w), w.nnz, w.shape)
        if key != self._diag_key:
            self._diag_key = key
            self._diag = w.shape[0] == w.shape[1] and bool(w.diagonal().any())
        return self._diag

    def _file_fragment_ids(self, path: str) -> set[int]:
        entry = self.index.files.get(path)
        return set(np.asarray(entry.windows).tolist()) if entry is not None else set()

    def leaked(self, path: str, prompt_start_line: int) -> np.ndarray:
        """Fragment ids excluded by the leak rule for a hole in `path` whose prompt starts at `prompt_start_line`."""
        frags = self.index.fragments
        out = [i for i in self._file_fragment_ids(path) if (f := frags[i]) is not None and f.locations
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
        best: tuple[int, int] | None = None
        for i in self._file_fragment_ids(path):
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
        # W only when FragRel is on: after an index change it is rebuilt on first use (milliseconds)
        w = self.index.symmetric_relations if alpha != 0.0 else None
        semantic = self._semantic_sums(s_ind, available) if alpha != 0.0 and rc.semantic > 0.0 else None
        scores = fragrel_scores(s_ind, w, alpha, available=available, extra=extra,
                                drop_diagonal=w is not None and self._has_diagonal(w), lenders=lenders,
                                semantic=semantic)
        t3 = time.perf_counter()
        timings["fragrel"] = (t3 - t2) * 1e3

        hits = self._top(scores.s_ind, scores.s_env, scores.s_rel, available, top_k, path, prompt_start_line)
        timings["rank"] = (time.perf_counter() - t3) * 1e3
        return RetrievalResult(hits=hits, excluded=excluded, timings_ms=timings)

    def _semantic_sums(self, s_ind: np.ndarray, available: np.ndarray) -> SemanticSums:
        """Eq. 6's part of Eq. 9, among the fragments most similar to the query."""
        if self._semantic is None:
            self._semantic = relations_for(self.config)
        frags = self.index.fragments

        def texts(ids: np.ndarray) -> list[str]:
            return [f.text if (f := frags[i]) is not None else "" for i in ids.tolist()]

        ids, num, den = self._semantic.environment(s_ind, available, texts)
        return SemanticSums(ids, num, den, self.config.retrieval.semantic)

    def _top(self, s_ind: np.ndarray, s_env: np.ndarray, s_rel: np.ndarray, available: np.ndarray, k: int,
             path: str | None, prompt_start: int) -> list[Hit]:
        ok = available & (s_rel > 0)
        ranked = np.where(ok, s_rel, -np.inf)
        n_ok = int(np.count_nonzero(ok))
        family = family_for(path) if path is not None else None
        hits: list[Hit] = []
        pool = min(k, n_ok)
        while pool > 0:  # widen the pool until k hits of the hole's language family are found (or none is left)
            hits = []
            for i in _best(ranked, pool).tolist():
                frag = self.index.fragments[i]
                if frag is None:  # defensive: alive mask and fragments disagree mid-update
                    continue
                locs = tuple(sorted(frag.locations))
                if family is not None:  # the hole's language family first, then files of no known language
                    locs = tuple(sorted((loc for loc in locs if family_for(loc.path) in (family, None)),
                                        key=lambda loc: (family_for(loc.path) is None, loc)))
                    if not locs:
                        continue
                shown = next((loc for loc in locs if loc.path != path or loc.end_line <= prompt_start), locs[0])
                hits.append(Hit(i, float(s_ind[i]), float(s_env[i]), float(s_rel[i]), shown, locs))
                if len(hits) == k:
                    return hits
            if pool >= n_ok:
                break
            pool = min(n_ok, pool * 4)
        return hits


_SAMPLE_STRIDE = 32


def _best(ranked: np.ndarray, pool: int) -> np.ndarray:
    """Ids of the `pool` best finite scores, by score, ties by id (all finite ones if fewer).

    A strided sample's pool-th best is no better than the whole array's, so every one of the `pool` best, ties
    included, scores at least that: only those few are sorted (an argpartition of every fragment's score took 7 ms
    a request in a monorepo)."""
    sample = ranked[::_SAMPLE_STRIDE]
    floor = np.partition(sample, len(sample) - pool)[len(sample) - pool] if len(sample) > pool else -np.inf
    cand = np.flatnonzero(ranked >= floor) if np.isfinite(floor) else np.flatnonzero(np.isfinite(ranked))
    return cand[np.lexsort((cand, -ranked[cand]))][:pool]


# -- RepoCoder's query rule ------------------------------------------------------------------------------------

_DRAFT_LINES = 10  # RepoCoder: first 10 non-blank lines of the previous draft join the next query


def round_query(r: int, before: list[str], partial: str, draft: str, window: int, stride: int) -> str:
    """Round r's query: the last `window` lines before the cursor (the partly typed line counts) in round 1; then
    `next_query` with the previous round's draft."""
    if r == 1:
        return "\n".join((before + ([partial] if partial else []))[-window:])
    return next_query(before, partial, draft, stride)


def draft_query_lines(draft: str, n: int = _DRAFT_LINES) -> list[str]:
    return [line for line in draft.split("\n") if line.strip()][:n]


def next_query(before: list[str], partial: str, draft: str, stride: int) -> str:
    """RepoCoder's round r+1 query: the last `stride` lines before the cursor + the first 10 non-blank draft lines.

    A draft continuing a partly typed line is read as that line completed (the partial line counts as a line).
    """
    if partial:
        first, _, rest = draft.partition("\n")
        lines = (before + [partial + first])[-stride:]
        return "\n".join(lines + draft_query_lines(rest, _DRAFT_LINES - (1 if first.strip() else 0)))
    return "\n".join(before[-stride:] + draft_query_lines(draft))


# -- FragRel over the session ----------------------------------------------------------------------------------

def session_relation(index: Index, retriever: Retriever, hole: Hole,
                     window: int) -> Callable[[str, int, str, int], float]:
    """relation(path, line, other_path, other_line): how strongly the place `path` line relates to the region of
    `other` through the code graph: the strongest max-product path from that region to the fragment covering the
    place. The cursor's region is the window before it, an entry's the window from its line; one graph query per
    region, asked only when the session memory needs it."""
    rows: dict[tuple[str, int], np.ndarray] = {}

    def relation(path: str, line: int, other_path: str, other_line: int) -> float:
        region = (other_path, other_line)
        if region not in rows:
            at_cursor = region == (hole.path, hole.line)
            start, end = (max(0, other_line - window), other_line + 1) if at_cursor else \
                (other_line, other_line + window)
            rows[region] = index.region_strength(other_path, start, end)
        fid = retriever.covering(path, line)
        row = rows[region]
        return float(row[fid]) if fid is not None and fid < len(row) else 0.0

    return relation
