"""Row surgery on CSR matrices in a few array passes: what an incremental update does to the graph's cost matrix
and the relation matrix, instead of rebuilding them (a diagonal mask times the matrix plus a patch cost a sparse
product over every entry: most of an update's time on a large repository)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import scipy.sparse as sp

_FEW_ROWS = 4096  # up to this many replaced rows, the rows between them are copied as slices (no masks)


def replace_rows(m: sp.csr_matrix, rows: np.ndarray, new: sp.csr_matrix, shape: tuple[int, int]) -> sp.csr_matrix:
    """`m`, grown to `shape`, with its rows `rows` (sorted, unique) replaced by the rows of `new`, in order.

    The other rows keep their entries as they are (explicit zeros too)."""
    rows = np.asarray(rows, np.int64)
    n_rows = shape[0]
    old_len = np.zeros(n_rows, np.int64)
    old_len[:m.shape[0]] = np.diff(m.indptr)
    length = old_len.copy()
    length[rows] = np.diff(new.indptr)
    indptr = np.zeros(n_rows + 1, np.int64)
    np.cumsum(length, out=indptr[1:])
    dtype = np.result_type(m.dtype, new.dtype)
    if len(rows) <= _FEW_ROWS:  # an update: the old entries in runs between the replaced rows
        old_ptr = np.append(m.indptr, [m.indptr[-1]] * (n_rows - m.shape[0])).astype(np.int64)
        cuts = np.concatenate(([0], np.repeat(rows, 2) + np.tile([0, 1], len(rows)), [n_rows]))
        idx_parts, dat_parts = [], []
        for i, (lo, hi) in enumerate(zip(cuts[0::2].tolist(), cuts[1::2].tolist())):
            idx_parts.append(m.indices[old_ptr[lo]:old_ptr[hi]])
            dat_parts.append(m.data[old_ptr[lo]:old_ptr[hi]])
            if i < len(rows):
                idx_parts.append(new.indices[new.indptr[i]:new.indptr[i + 1]])
                dat_parts.append(new.data[new.indptr[i]:new.indptr[i + 1]])
        # in the index width `m` has where the columns allow it: scipy would otherwise scan the result to narrow it
        width = m.indices.dtype if shape[1] < np.iinfo(m.indices.dtype).max else np.int64
        indices = np.concatenate([p.astype(width, copy=False) for p in idx_parts])
        data = np.concatenate(dat_parts).astype(dtype, copy=False)
        if int(indptr[-1]) < np.iinfo(width).max:
            indptr = indptr.astype(width)
        return _sorted_csr(data, indices, indptr, shape, m.has_sorted_indices and new.has_sorted_indices)
    keep = np.ones(n_rows, bool)
    keep[rows] = False
    kept_old = np.repeat(keep[:m.shape[0]], old_len[:m.shape[0]])  # per entry of `m`: its row stays
    from_old = np.repeat(keep, length)  # per entry of the result: it comes from `m`
    indices = np.empty(int(indptr[-1]), np.int64)
    data = np.empty(int(indptr[-1]), dtype)
    indices[from_old], data[from_old] = m.indices[kept_old], m.data[kept_old]
    indices[~from_old], data[~from_old] = new.indices, new.data
    return _sorted_csr(data, indices, indptr, shape, m.has_sorted_indices and new.has_sorted_indices)


def _sorted_csr(data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, shape: tuple[int, int],
                is_sorted: bool) -> sp.csr_matrix:
    """The CSR of these arrays, told what is known of its rows' order (scipy would scan every entry to find out)."""
    out = sp.csr_matrix((data, indices, indptr), shape=shape)
    if is_sorted:
        out.has_sorted_indices = True
    return out


def drop_columns(m: sp.csr_matrix, columns: np.ndarray) -> sp.csr_matrix:
    """`m` without its entries in these columns, removed in place (with its explicit zeros: for matrices that keep
    none), or `m` as it is when it has none there."""
    if not len(columns):
        return m
    gone = np.zeros(m.shape[1], bool)
    gone[columns] = True
    hits = gone[m.indices]
    if hits.any():
        m.data[hits] = 0
        m.eliminate_zeros()  # in C, in place: a copy of every entry took longer than the rest of an update
    return m


# (indptr, indices, data, where, patch indptr, patch indices, patch data): see `PatchedRows.arrays`
KernelArrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]
_MERGE_ENTRIES = 1 << 12  # a PatchedRows is made whole again once its patch holds more entries than this ...
_MERGE_SHARE = 8  # ... and than 1/_MERGE_SHARE of its base's (a replace copies the patch, a merge the base too)


class PatchedRows:
    """A CSR matrix as the one last made whole (`base`: for a loaded index often read in place from its file) and
    the rows made again since (`patch`; `where[r]` is row r's row in it, -1 for the base's): an edit rewrites a
    few rows of a matrix of the repository's size without copying it (`replace_rows` copied the graph's cost
    matrix, F and F's transpose whole on every keystroke: 250 MB and 130 ms in a 7.6-million-line monorepo).

    Immutable: `replace` gives a new one sharing the arrays, so a reader keeps what it read. The compiled kernels
    read `arrays()` (see graph.maxproduct); the rest asks for `rows`, or `merged` for the whole matrix."""

    def __init__(self, base: sp.csr_matrix, ids: np.ndarray | None = None, patch: sp.csr_matrix | None = None,
                 shape: tuple[int, int] | None = None) -> None:
        self.base = base
        self.shape = base.shape if shape is None else shape
        self.ids = np.zeros(0, np.int64) if ids is None else ids  # patched rows, sorted
        self.patch = sp.csr_matrix((0, self.shape[1]), dtype=base.dtype) if patch is None else patch
        self.where = np.zeros(0, np.int32)  # empty while nothing is patched
        if len(self.ids):
            self.where = np.full(self.shape[0], -1, np.int32)
            self.where[self.ids] = np.arange(len(self.ids), dtype=np.int32)

    def replace(self, rows: np.ndarray, new: sp.csr_matrix, shape: tuple[int, int], merge: bool = True
                ) -> PatchedRows:
        """This matrix grown to `shape`, its rows `rows` (sorted, unique) replaced by the rows of `new`; made whole
        when the patch outgrows its share unless not to `merge` (a save that writes it block by block follows)."""
        rows = np.asarray(rows, np.int64)
        at = np.minimum(np.searchsorted(rows, self.ids), max(len(rows) - 1, 0))
        earlier = np.flatnonzero(rows[at] != self.ids) if len(rows) else np.arange(len(self.ids))  # not redone
        grown = np.arange(self.base.shape[0], shape[0])  # rows past the base's are patched (empty) rows
        if len(grown):
            grown = grown[~np.isin(grown, np.concatenate((self.ids, rows)))]
        ids = np.concatenate((self.ids[earlier], rows, grown))
        patch = sp.vstack([with_columns(self.patch[earlier], shape[1]), with_columns(new, shape[1]),
                           sp.csr_matrix((len(grown), shape[1]), dtype=self.patch.dtype)], format="csr")
        order = np.argsort(ids, kind="stable")
        ids, patch = ids[order], patch[order]
        patch.sort_indices()
        if merge and patch.nnz > max(_MERGE_ENTRIES, self.base.nnz // _MERGE_SHARE):
            return PatchedRows(replace_rows(self.base, ids, patch, shape))
        return PatchedRows(self.base, ids, patch, shape)

    @property
    def dtype(self) -> np.dtype:
        return np.result_type(self.base.dtype, self.patch.dtype)

    def rows(self, ids: np.ndarray) -> sp.csr_matrix:
        """These rows, in this order, as a CSR of this matrix's width."""
        ids = np.asarray(ids, np.int64)
        at = self.where[ids] if len(self.ids) else np.full(len(ids), -1)
        patched = at >= 0
        if not patched.any():
            return with_columns(self.base[ids], self.shape[1])
        parts = [with_columns(self.base[ids[~patched]], self.shape[1]),
                 with_columns(self.patch[at[patched]], self.shape[1])]
        order = np.argsort(np.concatenate((np.flatnonzero(~patched), np.flatnonzero(patched))), kind="stable")
        return sp.vstack(parts, format="csr")[order]

    def merged(self) -> sp.csr_matrix:
        """The whole matrix as one CSR (a copy when rows are patched: for a save, a compaction, explanations)."""
        if not len(self.ids):
            return with_columns(self.base, self.shape[1])
        return replace_rows(self.base, self.ids, self.patch, self.shape)

    def row_blocks(self, rows_per_block: int = 1 << 16) -> Iterator[sp.csr_matrix]:
        """The whole matrix as consecutive blocks of rows (a save writes them: `merged` is a copy of it all)."""
        for lo in range(0, self.shape[0], rows_per_block):
            hi = min(lo + rows_per_block, self.shape[0])
            if len(self.ids) and (self.where[lo:hi] >= 0).any():
                yield self.rows(np.arange(lo, hi))
            else:
                yield with_columns(self.base[lo:hi], self.shape[1])

    def arrays(self) -> KernelArrays:
        """(indptr, indices, data, where, patch indptr, patch indices, patch data) for compiled kernels: row r is
        the patch's row where[r] when where is not empty and where[r] >= 0, else the base's row r. Data float64."""
        b, p = self.base, self.patch
        return (b.indptr, b.indices, b.data.astype(np.float64, copy=False), self.where, p.indptr, p.indices,
                p.data.astype(np.float64, copy=False))


def patched(m: sp.spmatrix | PatchedRows) -> PatchedRows:
    """`m` as a PatchedRows, its rows sorted (kernels find a hub's neighbourhood in a row by binary search; a
    PatchedRows keeps its rows sorted)."""
    if isinstance(m, PatchedRows):
        return m
    m = m.tocsr()
    return PatchedRows(m if m.has_sorted_indices else m.sorted_indices())


def with_columns(m: sp.spmatrix, n_cols: int) -> sp.csr_matrix:
    """`m` as a CSR of `n_cols` columns (one made before columns were added: fragments, nodes; its arrays
    shared)."""
    m = m.tocsr()
    if m.shape[1] == n_cols:
        return m
    out = sp.csr_matrix((m.data, m.indices, m.indptr), shape=(m.shape[0], n_cols))
    out.has_sorted_indices = m.has_sorted_indices
    return out
