"""Row surgery on CSR matrices in a few array passes: what an incremental update does to the graph's cost matrix
and the relation matrix, instead of rebuilding them (a diagonal mask times the matrix plus a patch cost a sparse
product over every entry: most of an update's time on a large repository)."""

from __future__ import annotations

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
