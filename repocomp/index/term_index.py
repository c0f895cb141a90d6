"""Sparse term index over fragment texts: token-set Jaccard (RepoCoder) and Okapi BM25 as sparse array work.

Layout: a column-major (CSC, term x row) snapshot of term counts (`base`) plus a small `delta` of rows changed
since the snapshot. A query touches only the postings of its own terms (gathered with numpy, no Python loop over
rows), so its cost follows the query, not the corpus. Jaccard's intersections are counted by a compiled loop over
the query terms' postings where they lie (a monorepo's query runs over millions of postings: copying them out and
counting with `np.bincount` took four times as long). `set_rows` patches per-row term lists, corpus statistics
and the delta in a few milliseconds; the snapshot is folded again only when the delta grows large.

BM25 follows rank-bm25's `BM25Okapi` exactly (k1=1.5, b=0.75, idf = ln(N - df + 0.5) - ln(df + 0.5), negative
idfs floored to epsilon * mean idf, query terms counted with repetition) so tests can compare with it.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np
import scipy.sparse as sp

from graph.csr_rows import replace_rows
from repocomp.config.schema import SIMILARITIES
from repocomp.index.store import Chunks
from repocomp.index.vocabulary import StoredVocabulary, term_ids, vocabulary_arrays
from repocomp.index.yielding import checkpoint, spans
from repocomp.tokenize import code_tokens

__all__ = ["TermIndex", "StateVersionError", "check_compressed"]

log = logging.getLogger(__name__)

# fold the delta into the snapshot beyond this many changed rows, or 1/256 of the rows if more: a fold copies every
# row and posting (630 MB in a 7.6-million-line monorepo), a delta costs each update and query in its own size
_MAX_DELTA_ROWS = 512
_DELTA_SHARE = 256
_STATE_VERSION = 3


class StateVersionError(ValueError):
    """`from_state` got a state of another `_STATE_VERSION` (written by another repocomp): not damage, a rebuild."""


@numba.njit(cache=True, nogil=True)
def _count_postings(indptr: np.ndarray, rows: np.ndarray, terms: np.ndarray, out: np.ndarray) -> None:
    """out[row] += 1 for every posting of `terms` (ids within the table)."""
    for t in terms:
        for j in range(indptr[t], indptr[t + 1]):
            out[rows[j]] += 1


@numba.njit(cache=True, nogil=True)
def _jaccard(inter: np.ndarray, q_distinct: np.float32, row_set: np.ndarray, out: np.ndarray) -> None:
    """out = |Q & D| / |Q | D| per row (0 where the union is empty), in one pass."""
    for i in range(len(inter)):
        union = q_distinct + row_set[i] - np.float32(inter[i])
        out[i] = np.float32(inter[i]) / union if union > 0 else np.float32(0.0)


@numba.njit(cache=True, nogil=True)
def _merge_postings(t0, t1, b_ptr, b_rows, b_counts, stale, d_ptr, d_rows, d_counts, rows_out,
                    counts_out):  # pragma: no cover - compiled
    """Terms [t0, t1)'s postings: the base's less its stale rows, merged in row order with the delta's (which
    hold only terms below len(d_ptr) - 1, the base's below len(b_ptr) - 1); written to the outputs in order."""
    k = 0
    for t in range(t0, t1):
        i, i_end = (b_ptr[t], b_ptr[t + 1]) if t < b_ptr.shape[0] - 1 else (0, 0)
        j, j_end = (d_ptr[t], d_ptr[t + 1]) if t < d_ptr.shape[0] - 1 else (0, 0)
        while i < i_end or j < j_end:
            if i < i_end and stale[b_rows[i]]:
                i += 1
            elif j >= j_end or (i < i_end and b_rows[i] < d_rows[j]):
                rows_out[k], counts_out[k] = b_rows[i], b_counts[i]
                i += 1
                k += 1
            else:
                rows_out[k], counts_out[k] = d_rows[j], d_counts[j]
                j += 1
                k += 1
    return k


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
        starts, ends = self.indptr[known], self.indptr[known + 1]
        if int((ends - starts).sum()) == 0:
            return np.zeros(0, np.int32), np.zeros(0, np.float32), np.zeros(0, np.int64)
        # one slice per query term, copied end to end: a common term's postings are long and contiguous, so this
        # is a copy, not an index computed and gathered per posting
        spans = list(zip(starts.tolist(), ends.tolist()))
        rows = np.concatenate([self.rows[lo:hi] for lo, hi in spans])
        counts = np.concatenate([self.counts[lo:hi] for lo, hi in spans])
        return rows, counts, np.repeat(positions, ends - starts)


_FLAG_SHARE = 8  # a term in at least this share (1/8) of the base's rows is counted from a row of flags
_FLAG_ROWS_MAX = 64  # and at most this many terms (the commonest): 64 bytes per fragment at most


@dataclass(frozen=True)
class _Flags:
    """The base's commonest terms as one byte per row each (1 where the row holds the term).

    Jaccard's intersection counts, per row, the query terms it holds. Scattered from the postings that is a random
    increment per posting, and a query's common terms (`(`, `self`, `=`, ...) hold most of them: on a 7.6-million
    -line monorepo 93% of a query's 7.9 million postings are those of the 59 terms in an eighth of the rows or
    more (86% those of the 31 in a quarter). Added as rows of bytes the same count is a vectorized pass per term, a
    few times faster: `repocomp bench retrieve` on it, similarity p50 / p95 4.3 / 6.8 ms with an eighth, 5.3-5.9 /
    9.2-9.7 with a quarter, 14.6 / 23.0 from the postings alone."""

    postings: _Postings  # the base they flag
    slot: np.ndarray  # per term id of the base: its row of flags, -1 when counted from its postings
    flags: np.ndarray  # uint8 (terms flagged, rows)

    @classmethod
    def of(cls, postings: _Postings, n_rows: int) -> _Flags:
        df = np.diff(postings.indptr)
        common = np.flatnonzero(df * _FLAG_SHARE >= max(n_rows, 1))
        common = common[np.argsort(-df[common], kind="stable")[:_FLAG_ROWS_MAX]]
        slot = np.full(len(df), -1, np.int64)
        slot[common] = np.arange(len(common))
        flags = np.zeros((len(common), n_rows), np.uint8)
        for k, t in enumerate(common.tolist()):
            checkpoint()  # (a save's read-back beside the language server's requests: a slice a term)
            flags[k, postings.rows[postings.indptr[t]:postings.indptr[t + 1]]] = 1
        return cls(postings, slot, flags)

    def count(self, terms: np.ndarray, out: np.ndarray) -> None:
        """out[row] += the number of `terms` (ids within the table) that row holds."""
        slots = self.slot[terms]
        flagged = slots[slots >= 0]
        _count_postings(self.postings.indptr, self.postings.rows, terms[slots < 0], out)
        if len(flagged):
            acc = self.flags[flagged[0]].copy()
            for k in flagged[1:].tolist():  # at most _FLAG_ROWS_MAX, so a byte never overflows
                np.add(acc, self.flags[k], out=acc)
            np.add(out[:len(acc)], acc, out=out[:len(acc)], casting="unsafe")


def check_compressed(indptr: np.ndarray, n: int, ids: np.ndarray, n_ids: int) -> bool:
    """Whether a compressed table of `n` entries over `n_ids` ids is whole: pointers rising from 0 to its length,
    ids in range. Checked a span at a time (`yielding.spans`): a monorepo's tables, read back by a save beside the
    language server's requests, took 33 ms of one slice checked at once."""
    if len(indptr) != n + 1 or indptr[0] != 0 or indptr[-1] != len(ids):
        return False
    for part in spans(n):
        if (np.diff(indptr[part.start:part.stop + 1]) < 0).any():
            return False
    for part in spans(len(ids)):
        chunk = ids[part]
        if not 0 <= chunk.min() <= chunk.max() < n_ids:
            return False
    return True


class TermIndex:
    """Rows (fragment ids) of tokenized texts; `None` rows are empty (removed fragments).

    Rows are kept as one row-major CSR of term ids and counts as of the last fold (`_rows`), plus the rows set
    since (`_changed`): a few arrays whatever the row count, not two small arrays per row."""

    def __init__(self) -> None:
        # token -> term id: a dict while building, the stored arrays once loaded (repocomp.index.vocabulary)
        self.vocab: dict[str, int] | StoredVocabulary = {}
        self._rows = sp.csr_matrix((0, 0), dtype=np.float32)  # rows x terms counts, as of the last fold
        self._present = np.zeros(0, bool)  # per row: holds a text (False: never set, or cleared)
        self._changed: dict[int, tuple[np.ndarray, np.ndarray] | None] = {}  # rows set since the fold
        self._df = np.zeros(0, np.int64)  # documents containing each term
        self._n_docs = 0  # live (non-None) rows
        self._total_len = 0  # tokens over live rows
        self._row_len = np.zeros(0, np.float32)  # tokens per row (BM25 doc length)
        self._row_set = np.zeros(0, np.float32)  # distinct terms per row (Jaccard |D|)
        self._base = _Postings.empty(0)
        self._base_of: sp.csr_matrix | None = None  # the rows `_base` holds the postings of
        self._stale = np.zeros(0, bool)  # base rows overridden by the delta
        self._delta = _Postings.empty(0)
        # False while the delta's postings wait for the save that follows (`folds_deferred`) or a query meanwhile:
        # a build's batch held them (100 MB for 64 MB of source) through its relations, which never read them
        self._delta_made = True
        self._making_delta = threading.Lock()  # queries run concurrently (the server's read lock): one makes it
        self._flags: _Flags | None = None  # the base's common terms as flags, made on first use after it changes
        self._making_flags = threading.Lock()  # held while one thread makes them: the others never wait for it
        self._idf_cache: tuple[int, np.ndarray] | None = None
        self._version = 0  # bumps on every change; keys the idf cache
        # set while a save follows the changes at once (a build's batches): it writes the rows set since folded in,
        # so folding them in here would only copy the rows and postings whole once more
        self.folds_deferred = False

    # -- construction -------------------------------------------------------------------------------------

    @classmethod
    def build(cls, texts: Iterable[str | None]) -> TermIndex:
        """The index of `texts` (any iterable: fragment texts are made one at a time, never all held)."""
        idx = cls()
        lengths: list[int] = []
        present: list[bool] = []
        term_parts: list[np.ndarray] = []
        count_parts: list[np.ndarray] = []
        chunk_terms: list[np.ndarray] = []
        chunk_counts: list[np.ndarray] = []
        for text in texts:
            present.append(text is not None)
            if text is None:
                lengths.append(0)
                continue
            terms, counts = idx._encode(text)
            lengths.append(len(terms))
            chunk_terms.append(terms)
            chunk_counts.append(counts)
            if len(chunk_terms) == 4096:  # many small arrays -> one, as they come
                term_parts.append(np.concatenate(chunk_terms))
                count_parts.append(np.concatenate(chunk_counts))
                chunk_terms, chunk_counts = [], []
        term_parts += chunk_terms
        count_parts += chunk_counts
        indptr = np.zeros(len(lengths) + 1, np.int64)
        np.cumsum(lengths, out=indptr[1:])
        terms = np.concatenate(term_parts) if term_parts else np.zeros(0, np.int32)
        del term_parts
        counts = np.concatenate(count_parts) if count_parts else np.zeros(0, np.float32)
        del count_parts
        idx._set_folded(np.array(present, bool), indptr, terms, counts)
        return idx

    def _set_folded(self, present: np.ndarray, indptr: np.ndarray, terms: np.ndarray, counts: np.ndarray) -> None:
        """Take these rows (CSR over `self.vocab`) as the whole index, with their statistics and postings."""
        n, n_terms = len(present), len(self.vocab)
        self._rows = sp.csr_matrix((counts, terms, indptr), shape=(n, n_terms))
        running = np.zeros(len(counts) + 1, np.float64)
        np.cumsum(counts, out=running[1:])
        row_len = (running[indptr[1:]] - running[indptr[:-1]]).astype(np.float32)
        del running
        self._set_statistics(present, row_len, np.bincount(terms, minlength=n_terms).astype(np.int64))
        self._fold()

    def _set_statistics(self, present: np.ndarray, row_len: np.ndarray, df: np.ndarray) -> None:
        self._present, self._row_len, self._df = present, row_len, df
        self._row_set = np.diff(self._rows.indptr).astype(np.float32)
        self._n_docs = int(present.sum())
        self._total_len = int(row_len.sum(dtype=np.float64))
        self._version += 1

    def take(self, rows: np.ndarray) -> TermIndex:
        """A new index whose row i is this one's row `rows[i]`, with a vocabulary of the terms those rows use
        (what `build` on their texts gives, without tokenizing again)."""
        self._fold()
        kept = self._rows[rows]
        used = np.zeros(len(self.vocab), bool)
        used[kept.indices] = True
        remap = np.cumsum(used, dtype=np.int64) - 1  # monotone: a row's term ids stay sorted
        new = TermIndex()
        new.vocab = {tok: int(remap[i]) for tok, i in self.vocab.items() if used[i]}
        new._set_folded(self._present[rows], kept.indptr.astype(np.int64),
                        remap[kept.indices].astype(np.int32), kept.data.astype(np.float32))
        return new

    @property
    def n_rows(self) -> int:
        return len(self._present)

    def nonempty(self) -> np.ndarray:
        """Bool per row: the row holds at least one token (removed rows never do)."""
        return self._row_set > 0

    def _encode(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        vocab = self.vocab
        tokens = code_tokens(text)
        ids = vocab.ids(tokens) if isinstance(vocab, StoredVocabulary) else [
            vocab.setdefault(tok, len(vocab)) for tok in tokens]
        if not ids:
            return np.zeros(0, np.int32), np.zeros(0, np.float32)
        terms, counts = np.unique(np.asarray(ids, np.int32), return_counts=True)
        return terms, counts.astype(np.float32)

    def _row(self, i: int) -> tuple[np.ndarray, np.ndarray] | None:
        """Row `i`'s (terms, counts), None when it holds no text."""
        if i in self._changed:
            return self._changed[i]
        if not self._present[i]:
            return None
        lo, hi = self._rows.indptr[i], self._rows.indptr[i + 1]
        return self._rows.indices[lo:hi], self._rows.data[lo:hi]

    def _grow(self, n_rows: int) -> None:
        if n_rows > self.n_rows:
            extra = n_rows - self.n_rows
            self._present = np.concatenate([self._present, np.zeros(extra, bool)])
            self._row_len = np.concatenate([self._row_len, np.zeros(extra, np.float32)])
            self._row_set = np.concatenate([self._row_set, np.zeros(extra, np.float32)])
        if len(self.vocab) > len(self._df):
            self._df = np.concatenate([self._df, np.zeros(len(self.vocab) - len(self._df), np.int64)])

    def set_rows(self, ids: list[int], texts: Iterable[str | None]) -> None:
        """Replace rows `ids` by `texts` (None clears a row); ids past the end grow the index. `texts` may be made
        one at a time (a build's batch: its windows' texts together are twice its source)."""
        encoded = [None if t is None else self._encode(t) for t in texts]
        if len(ids) != len(encoded):
            raise ValueError("ids and texts differ in length")
        if not ids:
            return
        self._grow(max(ids) + 1)
        for row, enc in zip(ids, encoded):
            old = self._row(row)
            if old is not None:
                self._df[old[0]] -= 1
                self._n_docs -= 1
                self._total_len -= int(self._row_len[row])
            self._changed[row] = enc
            self._present[row] = enc is not None
            if enc is None:
                self._row_len[row] = self._row_set[row] = 0.0
            else:
                terms, counts = enc
                self._df[terms] += 1
                self._n_docs += 1
                self._row_len[row] = counts.sum()
                self._row_set[row] = len(terms)
                self._total_len += int(self._row_len[row])
        self._version += 1
        if self.folds_deferred:
            self._delta_made = False
        elif len(self._changed) > max(_MAX_DELTA_ROWS, self.n_rows // _DELTA_SHARE):
            self._fold()
        else:
            self._rebuild_delta()

    def _current_delta(self) -> tuple[_Postings, np.ndarray]:
        """The delta's postings and the base rows they override, made now if they wait (see `_delta_made`)."""
        if not self._delta_made:
            with self._making_delta:
                if not self._delta_made:
                    self._rebuild_delta()
                    self._delta_made = True
        return self._delta, self._stale

    def _rebuild_delta(self) -> None:
        ids = sorted(self._changed)
        live = [i for i in ids if self._changed[i] is not None]
        rows = [self._changed[i] for i in live]
        self._delta = _Postings.from_rows(np.asarray(live, np.int64), [r[0] for r in rows],  # type: ignore[index]
                                          [r[1] for r in rows], len(self.vocab))  # type: ignore[index]
        n_base = self._rows.shape[0]
        self._stale = np.zeros(n_base, bool)
        stale = np.asarray(ids, np.int64)
        self._stale[stale[stale < n_base]] = True

    def _fold(self) -> None:
        """Fold the rows set since the last fold into the row CSR and snapshot it into the base postings; empties
        the delta."""
        rows, base = self._folded()
        if rows is self._rows and base is self._base:
            return  # the postings are these rows' already
        self._rows, self._base, self._flags = rows, base, None
        self._base_of = self._rows
        self._changed.clear()
        self._delta = _Postings.empty(len(self.vocab))
        self._stale = np.zeros(self.n_rows, bool)
        self._delta_made = True

    def _changed_rows(self) -> tuple[np.ndarray, sp.csr_matrix]:
        """The rows set since the last fold: their ids (sorted) and their CSR (a cleared row is empty)."""
        ids = np.array(sorted(self._changed), np.int64)
        rows = [self._changed[i] for i in ids.tolist()]
        indptr = np.zeros(len(ids) + 1, np.int64)
        np.cumsum([0 if r is None else len(r[0]) for r in rows], out=indptr[1:])
        live = [r for r in rows if r is not None]
        terms = np.concatenate([r[0] for r in live]) if live else np.zeros(0, np.int32)
        counts = np.concatenate([r[1] for r in live]) if live else np.zeros(0, np.float32)
        return ids, sp.csr_matrix((counts, terms, indptr), shape=(len(ids), len(self.vocab)))

    def _folded(self) -> tuple[sp.csr_matrix, _Postings]:
        """The rows with those set since the last fold written in, and their postings (a transpose in scipy's C
        code); the index itself unchanged."""
        n, n_terms = self.n_rows, len(self.vocab)
        base = self._rows
        if not self._changed and base.shape == (n, n_terms) and self._base_of is base:
            return base, self._base
        rows = base
        if self._changed or base.shape != (n, n_terms):
            ids, changed = self._changed_rows()
            rows = replace_rows(base, ids, changed, (n, n_terms))
        by_term = rows.tocsc()
        return rows, _Postings(by_term.indptr.astype(np.int64), by_term.indices.astype(np.int32, copy=False),
                               by_term.data)

    # -- scoring --------------------------------------------------------------------------------------------

    def _query_terms(self, query: str) -> tuple[np.ndarray, np.ndarray, int]:
        """Known query term ids, their counts in the query, and the query's distinct-token count."""
        toks = code_tokens(query)
        per_token = Counter(toks)
        ids = term_ids(self.vocab, list(per_token))  # one lookup per distinct token
        counts = np.fromiter(per_token.values(), np.float32, len(per_token))
        known = ids >= 0
        order = np.argsort(ids[known])  # distinct tokens have distinct ids: sorted, they are the unique terms
        return ids[known][order], counts[known][order], len(per_token)

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
        if method not in ("jaccard", "bm25"):
            raise ValueError(f"unknown similarity {method!r}; expected one of {', '.join(SIMILARITIES)}")
        # the snapshot's sums with the rows changed since replaced by the delta's: no per-posting filtering of the
        # snapshot (a common term's postings run into the millions), the same sums bit for bit
        sums = self._sums(self._base, terms, q_counts, method)
        if self._changed:
            delta, stale = self._current_delta()
            sums[:len(stale)][stale] = 0
            sums += self._sums(delta, terms, q_counts, method)
        if method == "jaccard":
            _jaccard(sums, np.float32(q_distinct), self._row_set, out)
        else:
            out[:] = sums
        return out

    def prepare(self) -> None:
        """Make now what the first query makes (80-150 ms for a 7.6-million-line monorepo): a process that serves
        requests does it once it has loaded or saved the index, beside them."""
        self._base_flags()

    def _base_flags(self) -> _Flags | None:
        """The base's `_Flags`, made here unless another thread is making them: then None, and a query counts
        from the postings (the same counts) rather than wait, since the maker may be a save pausing for requests
        between its slices."""
        def current(flags: _Flags | None) -> bool:
            return flags is not None and flags.postings is self._base

        flags = self._flags
        if not current(flags) and self._making_flags.acquire(blocking=False):
            try:
                flags = self._flags  # another thread may have made them since this one looked
                if not current(flags):
                    flags = self._flags = _Flags.of(self._base, self._rows.shape[0])
            finally:
                self._making_flags.release()
        return flags if current(flags) else None

    def _sums(self, postings: _Postings, terms: np.ndarray, q_counts: np.ndarray, method: str) -> np.ndarray:
        """Per row, the query terms' postings summed: their number (Jaccard's intersection, int32) or BM25's terms."""
        if method == "jaccard":
            counts_of = np.zeros(self.n_rows, np.int32)
            known = terms[terms < len(postings.indptr) - 1]
            if postings is self._base and (flags := self._base_flags()) is not None:
                flags.count(known, counts_of)
            else:
                _count_postings(postings.indptr, postings.rows, known, counts_of)
            return counts_of
        rows, counts, which = postings.gather(terms)
        k1, b = 1.5, 0.75
        avgdl = self._total_len / self._n_docs if self._n_docs else 1.0
        norm = k1 * (1.0 - b + b * self._row_len[rows] / avgdl)
        weight = (self._idf()[terms] * q_counts)[which]
        contrib = weight * counts * (k1 + 1.0) / (counts + norm)
        return np.bincount(rows, weights=contrib, minlength=self.n_rows).astype(np.float64, copy=False)

    # -- persistence ----------------------------------------------------------------------------------------

    STATE_VERSION = _STATE_VERSION
    # the arrays of a state: the rows (CSR), their postings (CSC) and statistics, stored as they are used, so that
    # a loaded index reads them in place instead of deriving them (a transpose of every posting)
    STATE_ARRAYS = ("alive", "indptr", "terms", "counts", "post_indptr", "post_rows", "post_counts", "row_len", "df",
                    "vocab_bytes", "vocab_ends", "vocab_slots")

    def state(self) -> dict[str, Any]:
        """Plain arrays and scalars, no custom classes (the index codec stores them as they are). The rows set
        since the last fold are folded into the copies returned, not into the index: a save lets them go once
        written, and reads the index back from the file."""
        rows, base = self._folded()
        return self.state_without_large() | {"indptr": rows.indptr, "terms": rows.indices, "counts": rows.data,
                                             "post_indptr": base.indptr, "post_rows": base.rows,
                                             "post_counts": base.counts}

    def state_pieces(self, block_entries: int = 1 << 22) -> dict[str, Any]:
        """`state()` with its tables of one entry per posting as `Chunks` of about `block_entries` entries each:
        the rows set since the last fold merged into the rows and the postings as they are, block by block as a
        write asks for them, never folded into a copy of either (a save of a 7.6-million-line index held 630 MB
        more for that)."""
        if self._base_of is not self._rows:  # (never after a build, a load or a fold)
            self._fold()
        (base, post), (delta, stale) = (self._rows, self._base), self._current_delta()
        n, n_terms = self.n_rows, len(self.vocab)
        n_base, base_terms = base.shape
        ids, new_rows = self._changed_rows()
        lengths = np.zeros(n, np.int64)
        lengths[:n_base] = np.diff(base.indptr)
        lengths[ids] = np.diff(new_rows.indptr)
        indptr = np.zeros(n + 1, np.int64)
        np.cumsum(lengths, out=indptr[1:])
        if indptr[-1] <= np.iinfo(np.int32).max:  # scipy's index width, as a fold's rows have it
            indptr = indptr.astype(np.int32)
        per_term = np.zeros(n_terms, np.int64)  # postings per term: the base's, less the changed rows', the delta's
        per_term[:base_terms] = np.diff(post.indptr)
        per_term -= np.bincount(base[ids[ids < n_base]].indices, minlength=n_terms)
        per_term[:len(delta.indptr) - 1] += np.diff(delta.indptr)
        post_indptr = np.zeros(n_terms + 1, np.int64)
        np.cumsum(per_term, out=post_indptr[1:])
        row_step = max(1, int(block_entries * n // max(int(indptr[-1]), 1)))

        def row_blocks(part: str) -> Iterable[np.ndarray]:
            for lo in range(0, n, row_step):
                hi = min(n, lo + row_step)
                at = np.flatnonzero((ids >= lo) & (ids < hi))
                if not len(at) and hi <= n_base:  # rows as they are: the base's slice
                    span = slice(int(base.indptr[lo]), int(base.indptr[hi]))
                    yield base.indices[span] if part == "terms" else base.data[span]
                    continue
                block = base[min(lo, n_base):min(hi, n_base)]
                block.resize((hi - lo, n_terms))
                block = replace_rows(block, ids[at] - lo, new_rows[at], (hi - lo, n_terms))
                yield block.indices.astype(base.indices.dtype, copy=False) if part == "terms" else block.data

        term_bounds = np.unique(np.concatenate((np.searchsorted(post_indptr, np.arange(0, int(post_indptr[-1]),
                                                                                       block_entries)), [n_terms])))

        def posting_blocks(part: str) -> Iterable[np.ndarray]:
            for t0, t1 in zip(term_bounds[:-1].tolist(), term_bounds[1:].tolist()):
                span = slice(int(post.indptr[min(t0, base_terms)]), int(post.indptr[min(t1, base_terms)]))
                if t1 <= base_terms and per_term[t0:t1].sum() == span.stop - span.start and \
                        delta.indptr[min(t0, len(delta.indptr) - 1)] == delta.indptr[min(t1, len(delta.indptr) - 1)]:
                    yield post.rows[span] if part == "post_rows" else post.counts[span]  # no changed row has these
                    continue
                rows = np.empty(int(post_indptr[t1] - post_indptr[t0]), np.int32)
                counts = np.empty(len(rows), np.float32)
                done = _merge_postings(t0, t1, post.indptr, post.rows, post.counts, stale, delta.indptr,
                                       delta.rows, delta.counts, rows, counts)
                assert done == len(rows)  # the counts above and the merge agree
                yield rows if part == "post_rows" else counts

        n_entries, n_postings = int(indptr[-1]), int(post_indptr[-1])
        return self.state_without_large() | {
            "indptr": indptr, "post_indptr": post_indptr,
            "terms": Chunks(base.indices.dtype, n_entries, lambda: row_blocks("terms")),
            "counts": Chunks(np.float32, n_entries, lambda: row_blocks("counts")),
            "post_rows": Chunks(np.int32, n_postings, lambda: posting_blocks("post_rows")),
            "post_counts": Chunks(np.float32, n_postings, lambda: posting_blocks("post_counts"))}

    def state_without_large(self) -> dict[str, Any]:
        """The state's version, vocabulary and per-row and per-term statistics."""
        return {"version": _STATE_VERSION, **{f"vocab_{k}": v for k, v in vocabulary_arrays(self.vocab).items()},
                "alive": self._present, "row_len": self._row_len, "df": self._df}

    @staticmethod
    def check_state_version(d: dict[str, Any]) -> None:
        """`StateVersionError` unless `d` (a `state()`, or its scalar part) is of this version's layout."""
        if d.get("version") != _STATE_VERSION:
            raise StateVersionError(f"term index state version {d.get('version')!r}, expected {_STATE_VERSION}")

    @classmethod
    def from_state(cls, d: dict[str, Any]) -> TermIndex:
        """The index of a `state()`, its arrays used as they are (views of the index file). `ValueError` when
        their shapes, dtypes or ids do not fit together (a damaged file)."""
        cls.check_state_version(d)
        idx = cls()
        if "vocab" in d:  # an index's own vocabulary, already made (its file read back)
            idx.vocab = d["vocab"]
        else:
            idx.vocab = StoredVocabulary(d["vocab_bytes"], d["vocab_ends"], d["vocab_slots"])
        n_terms, n = len(idx.vocab), len(d["alive"])
        kinds = {"alive": "b", "indptr": "i", "terms": "i", "counts": "f", "post_indptr": "i", "post_rows": "i",
                 "post_counts": "f", "row_len": "f", "df": "i"}
        if any(np.asarray(d[k]).dtype.kind != kind or np.ndim(d[k]) != 1 for k, kind in kinds.items()):
            raise ValueError("term index tables of another type")
        checkpoint()  # (a save's read-back beside the language server's requests: each check a slice)
        if not (check_compressed(d["indptr"], n, d["terms"], n_terms) and len(d["terms"]) == len(d["counts"])
                and check_compressed(d["post_indptr"], n_terms, d["post_rows"], n)
                and len(d["post_rows"]) == len(d["post_counts"])):
            raise ValueError("term index tables inconsistent")
        checkpoint()
        if len(d["row_len"]) != n or len(d["df"]) != n_terms or len(d["terms"]) != len(d["post_rows"]):
            raise ValueError("term index statistics of another size")
        idx._rows = sp.csr_matrix((d["counts"], d["terms"], d["indptr"]), shape=(n, n_terms))
        idx._base, idx._base_of = _Postings(d["post_indptr"], d["post_rows"], d["post_counts"]), idx._rows
        idx._delta, idx._stale = _Postings.empty(n_terms), np.zeros(n, bool)
        checkpoint()
        idx._set_statistics(d["alive"], d["row_len"], d["df"])
        return idx

    def to_csr(self) -> sp.csr_matrix:
        """Rows x terms count matrix (for inspection and tests)."""
        self._fold()
        return self._rows.copy()
