"""Sparse term index over fragment texts: token-set Jaccard (RepoCoder) and Okapi BM25 as sparse array work.

Layout: a column-major (CSC, term x row) snapshot of term counts (`base`) plus a small `delta` of rows changed
since the snapshot. A query touches only the postings of its own terms (gathered with numpy, no Python loop over
rows), so its cost follows the query, not the corpus. `set_rows` patches per-row term lists, corpus statistics
and the delta in a few milliseconds; the snapshot is folded again only when the delta grows large.

BM25 follows rank-bm25's `BM25Okapi` exactly (k1=1.5, b=0.75, idf = ln(N - df + 0.5) - ln(df + 0.5), negative
idfs floored to epsilon * mean idf, query terms counted with repetition) so tests can compare with it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from repocomp.config import SIMILARITIES
from repocomp.tokenize import code_tokens

__all__ = ["TermIndex", "StateVersionError"]

log = logging.getLogger(__name__)

_MAX_DELTA_ROWS = 512  # fold the delta into the snapshot beyond this many changed rows
_STATE_VERSION = 1


class StateVersionError(ValueError):
    """`from_state` got a state of another `_STATE_VERSION` (written by another repocomp): not damage, a rebuild."""


@dataclass(frozen=True)
class _Postings:
    """Term-major postings of a set of rows: for term t, rows[indptr[t]:indptr[t+1]] and their counts."""

    indptr: np.ndarray  # int64, n_terms + 1
    rows: np.ndarray  # int32 row ids
    counts: np.ndarray  # float32 term counts

    @classmethod
    def empty(cls, n_terms: int) -> _Postings:
        return cls(np.zeros(n_terms + 1, np.int64), np.zeros(0, np.int32), np.zeros(0, np.float32))

    @classmethod
    def from_rows(cls, row_ids: np.ndarray, terms: list[np.ndarray], counts: list[np.ndarray],
                  n_terms: int) -> _Postings:
        if not terms:
            return cls.empty(n_terms)
        lengths = np.fromiter((len(t) for t in terms), np.int64, len(terms))
        cols = np.concatenate(terms).astype(np.int64, copy=False)
        rows = np.repeat(row_ids.astype(np.int32, copy=False), lengths)
        data = np.concatenate(counts).astype(np.float32, copy=False)
        order = np.argsort(cols, kind="stable")
        indptr = np.zeros(n_terms + 1, np.int64)
        np.cumsum(np.bincount(cols, minlength=n_terms), out=indptr[1:])
        return cls(indptr, rows[order], data[order])

    def gather(self, terms: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(rows, counts, query-term position) of every posting of `terms` (term ids beyond the table: none)."""
        positions = np.flatnonzero(terms < len(self.indptr) - 1)
        known = terms[positions]
        starts = self.indptr[known]
        lengths = self.indptr[known + 1] - starts
        total = int(lengths.sum())
        if total == 0:
            return np.zeros(0, np.int32), np.zeros(0, np.float32), np.zeros(0, np.int64)
        offsets = np.cumsum(lengths) - lengths
        k = np.repeat(np.arange(len(known)), lengths)
        idx = np.arange(total) - offsets[k] + starts[k]
        which = positions[k]
        return self.rows[idx], self.counts[idx], which


class TermIndex:
    """Rows (fragment ids) of tokenized texts; `None` rows are empty (removed fragments)."""

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}
        self._terms: list[np.ndarray | None] = []  # per row: sorted unique term ids (int32)
        self._counts: list[np.ndarray | None] = []  # per row: counts of those terms (float32)
        self._df = np.zeros(0, np.int64)  # documents containing each term
        self._n_docs = 0  # live (non-None) rows
        self._total_len = 0  # tokens over live rows
        self._row_len = np.zeros(0, np.float32)  # tokens per row (BM25 doc length)
        self._row_set = np.zeros(0, np.float32)  # distinct terms per row (Jaccard |D|)
        self._base = _Postings.empty(0)
        self._n_base = 0
        self._stale = np.zeros(0, bool)  # base rows overridden by the delta
        self._delta = _Postings.empty(0)
        self._delta_ids: set[int] = set()
        self._idf_cache: tuple[int, np.ndarray] | None = None
        self._version = 0  # bumps on every change; keys the idf cache

    # -- construction -------------------------------------------------------------------------------------

    @classmethod
    def build(cls, texts: list[str | None]) -> TermIndex:
        idx = cls()
        idx.set_rows(list(range(len(texts))), texts)
        idx._fold()
        return idx

    def take(self, rows: np.ndarray) -> TermIndex:
        """A new index whose row i is this one's row `rows[i]`, with a vocabulary of the terms those rows use
        (what `build` on their texts gives, without tokenizing again)."""
        terms = [self._terms[r] for r in rows.tolist()]
        counts = [self._counts[r] for r in rows.tolist()]
        used = np.zeros(len(self.vocab), bool)
        for t in terms:
            if t is not None:
                used[t] = True
        remap = np.cumsum(used, dtype=np.int64) - 1  # monotone: a row's term ids stay sorted
        new = TermIndex()
        new.vocab = {tok: int(remap[i]) for tok, i in self.vocab.items() if used[i]}
        new._terms = [None if t is None else remap[t].astype(np.int32) for t in terms]
        new._counts = counts
        live = [t for t in new._terms if t is not None and len(t)]
        new._df = np.bincount(np.concatenate(live), minlength=len(new.vocab)).astype(np.int64) if live \
            else np.zeros(len(new.vocab), np.int64)
        new._row_len, new._row_set = self._row_len[rows], self._row_set[rows]
        new._n_docs = sum(t is not None for t in terms)
        new._total_len = int(new._row_len.sum())
        new._fold()
        return new

    @property
    def n_rows(self) -> int:
        return len(self._terms)

    def nonempty(self) -> np.ndarray:
        """Bool per row: the row holds at least one token (removed rows never do)."""
        return self._row_set > 0

    def _encode(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        vocab = self.vocab
        ids = [vocab.setdefault(tok, len(vocab)) for tok in code_tokens(text)]
        if not ids:
            return np.zeros(0, np.int32), np.zeros(0, np.float32)
        terms, counts = np.unique(np.asarray(ids, np.int32), return_counts=True)
        return terms, counts.astype(np.float32)

    def _grow(self, n_rows: int) -> None:
        if n_rows > len(self._terms):
            extra = n_rows - len(self._terms)
            self._terms.extend([None] * extra)
            self._counts.extend([None] * extra)
            self._row_len = np.concatenate([self._row_len, np.zeros(extra, np.float32)])
            self._row_set = np.concatenate([self._row_set, np.zeros(extra, np.float32)])
        if len(self.vocab) > len(self._df):
            self._df = np.concatenate([self._df, np.zeros(len(self.vocab) - len(self._df), np.int64)])

    def set_rows(self, ids: list[int], texts: list[str | None]) -> None:
        """Replace rows `ids` by `texts` (None clears a row); ids past the end grow the index."""
        if len(ids) != len(texts):
            raise ValueError("ids and texts differ in length")
        if not ids:
            return
        encoded = [None if t is None else self._encode(t) for t in texts]
        self._grow(max(ids) + 1)
        for row, enc in zip(ids, encoded):
            old = self._terms[row]
            if old is not None:
                self._df[old] -= 1
                self._n_docs -= 1
                self._total_len -= int(self._row_len[row])
            if enc is None:
                self._terms[row] = self._counts[row] = None
                self._row_len[row] = self._row_set[row] = 0.0
            else:
                terms, counts = enc
                self._terms[row], self._counts[row] = terms, counts
                self._df[terms] += 1
                self._n_docs += 1
                self._row_len[row] = counts.sum()
                self._row_set[row] = len(terms)
                self._total_len += int(self._row_len[row])
        self._version += 1
        self._delta_ids.update(ids)
        if len(self._delta_ids) > _MAX_DELTA_ROWS:
            self._fold()
        else:
            self._rebuild_delta()

    def _rebuild_delta(self) -> None:
        ids = np.fromiter(sorted(self._delta_ids), np.int64, len(self._delta_ids))
        live, terms, counts = self._live_rows(ids.tolist())
        self._delta = _Postings.from_rows(np.asarray(live, np.int64), terms, counts, len(self.vocab))
        self._stale = np.zeros(self._n_base, bool)
        self._stale[ids[ids < self._n_base]] = True

    def _live_rows(self, ids: Iterable[int]) -> tuple[list[int], list[np.ndarray], list[np.ndarray]]:
        """Those of `ids` whose rows are present, with their terms and counts (a row has both or neither)."""
        live: list[int] = []
        terms: list[np.ndarray] = []
        counts: list[np.ndarray] = []
        for i in ids:
            t, c = self._terms[i], self._counts[i]
            if t is not None:
                assert c is not None  # set_rows and load fill terms and counts together
                live.append(i)
                terms.append(t)
                counts.append(c)
        return live, terms, counts

    def _fold(self) -> None:
        """Snapshot every row into the base postings; empties the delta."""
        live, terms, counts = self._live_rows(range(len(self._terms)))
        self._base = _Postings.from_rows(np.asarray(live, np.int64), terms, counts, len(self.vocab))
        self._n_base = self.n_rows
        self._delta_ids.clear()
        self._delta = _Postings.empty(len(self.vocab))
        self._stale = np.zeros(self._n_base, bool)

    # -- scoring --------------------------------------------------------------------------------------------

    def _query_terms(self, query: str) -> tuple[np.ndarray, np.ndarray, int]:
        """Known query term ids, their counts in the query, and the query's distinct-token count."""
        toks = code_tokens(query)
        distinct = set(toks)
        known = [self.vocab[t] for t in toks if t in self.vocab]
        if not known:
            return np.zeros(0, np.int64), np.zeros(0, np.float32), len(distinct)
        terms, counts = np.unique(np.asarray(known, np.int64), return_counts=True)
        return terms, counts.astype(np.float32), len(distinct)

    def _gather(self, terms: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        rows, counts, which = self._base.gather(terms)
        if self._delta_ids:
            keep = ~self._stale[rows]
            rows, counts, which = rows[keep], counts[keep], which[keep]
            d_rows, d_counts, d_which = self._delta.gather(terms)
            rows = np.concatenate([rows, d_rows])
            counts = np.concatenate([counts, d_counts])
            which = np.concatenate([which, d_which])
        return rows, counts, which

    def _idf(self) -> np.ndarray:
        if self._idf_cache is not None and self._idf_cache[0] == self._version:
            return self._idf_cache[1]
        df = self._df
        present = df > 0
        n = float(self._n_docs)
        idf = np.zeros(len(df), np.float64)
        idf[present] = np.log(n - df[present] + 0.5) - np.log(df[present] + 0.5)
        if present.any():
            eps = 0.25 * idf[present].mean()  # rank-bm25's floor for terms in more than half the rows
            idf[present & (idf < 0)] = eps
        self._idf_cache = (self._version, idf)
        return idf

    def score(self, query: str, method: str = "jaccard") -> np.ndarray:
        """Similarity of `query` to every row (float32, length n_rows); empty rows score 0."""
        out = np.zeros(self.n_rows, np.float32)
        terms, q_counts, q_distinct = self._query_terms(query)
        if len(terms) == 0:
            return out
        rows, counts, which = self._gather(terms)
        if method == "jaccard":
            inter = np.bincount(rows, minlength=self.n_rows).astype(np.float32)
            union = q_distinct + self._row_set - inter
            np.divide(inter, union, out=out, where=union > 0)
        elif method == "bm25":
            k1, b = 1.5, 0.75
            avgdl = self._total_len / self._n_docs if self._n_docs else 1.0
            norm = k1 * (1.0 - b + b * self._row_len[rows] / avgdl)
            weight = (self._idf()[terms] * q_counts)[which]
            contrib = weight * counts * (k1 + 1.0) / (counts + norm)
            out[:] = np.bincount(rows, weights=contrib, minlength=self.n_rows)
        else:
            raise ValueError(f"unknown similarity {method!r}; expected one of {', '.join(SIMILARITIES)}")
        return out

    # -- persistence ----------------------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """Plain arrays and scalars, no custom classes (the index codec stores them as they are)."""
        alive = np.fromiter((t is not None for t in self._terms), bool, self.n_rows)
        lengths = np.fromiter((0 if t is None else len(t) for t in self._terms), np.int64, self.n_rows)
        indptr = np.zeros(self.n_rows + 1, np.int64)
        np.cumsum(lengths, out=indptr[1:])
        live_terms = [t for t in self._terms if t is not None]
        live_counts = [c for c in self._counts if c is not None]
        return {
            "version": _STATE_VERSION,
            "vocab": "\n".join(self.vocab),  # tokens never contain whitespace
            "alive": alive,
            "indptr": indptr,
            "terms": np.concatenate(live_terms) if live_terms else np.zeros(0, np.int32),
            "counts": np.concatenate(live_counts) if live_counts else np.zeros(0, np.float32),
        }

    @staticmethod
    def check_state_version(d: dict[str, Any]) -> None:
        """`StateVersionError` unless `d` (a `state()`, or its scalar part) is of this version's layout."""
        if d.get("version") != _STATE_VERSION:
            raise StateVersionError(f"term index state version {d.get('version')!r}, expected {_STATE_VERSION}")

    @classmethod
    def from_state(cls, d: dict[str, Any]) -> TermIndex:
        cls.check_state_version(d)
        idx = cls()
        words = d["vocab"].split("\n") if d["vocab"] else []
        idx.vocab = {w: i for i, w in enumerate(words)}
        alive, indptr = np.asarray(d["alive"], bool), np.asarray(d["indptr"], np.int64)
        terms = np.asarray(d["terms"], np.int32)
        counts = np.asarray(d["counts"], np.float32)
        n = len(alive)
        idx._terms = [terms[indptr[i]:indptr[i + 1]] if alive[i] else None for i in range(n)]
        idx._counts = [counts[indptr[i]:indptr[i + 1]] if alive[i] else None for i in range(n)]
        lengths = np.diff(indptr)
        row_of = np.repeat(np.arange(n), lengths)
        idx._row_len = np.bincount(row_of, weights=counts, minlength=n).astype(np.float32)
        idx._row_set = lengths.astype(np.float32)
        idx._df = np.bincount(terms, minlength=len(words)).astype(np.int64)
        idx._n_docs = int(alive.sum())
        idx._total_len = int(counts.sum())
        idx._fold()
        return idx

    def to_csr(self) -> sp.csr_matrix:
        """Rows x terms count matrix (for inspection and tests)."""
        st = self.state()
        return sp.csr_matrix((st["counts"], st["terms"], st["indptr"]), shape=(self.n_rows, len(self.vocab)))
