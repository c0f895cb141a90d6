"""Fragment-to-fragment relations from node relations.

Eq. 8 (code structure):  rel(c_i, c_j) = sum_kl len_k len_l Dis(g_k, g_l) / sum_kl len_k len_l
with F the fragment x node matrix of owned text lengths and D the node x node max-product strengths, this is
(F D F^T)_ij / (S_i S_j), S = F 1. Computed for a set of rows at a time, so an update recomputes only the rows
it touches. Eq. 7 (context structure): w_rel ** |loc_i - loc_j| for windows of one file, optionally combined.

A node whose text lies in more than `FANOUT_HUB` fragments (a module root owning the comment lines of a 100k-line
flat file) lends it in the product only to the `FANOUT_WINDOW` fragments either side, in id (that is, file)
order, of the row's fragment: otherwise every window of such a file relates to every other (10k x 10k products,
2 GB for a 1 MB file). Values for the fragments it does reach are exact, and files under about 10k lines (1024
windows) are unaffected.
"""

from __future__ import annotations

import numba
import numpy as np
import scipy.sparse as sp

from graph.csr_rows import PatchedRows, patched
from graph.maxproduct import lower_bound, max_product_strengths, source_chunks

ROW_CHUNK = 2048  # fragment rows folded at once: bounds the memory of the intermediate products
FANOUT_HUB = 1024  # a node in more fragments than this lends its text locally (see above) ...
FANOUT_WINDOW = 64  # ... to this many fragments either side of the row's


@numba.njit(cache=True)
def _top_k_mask(indptr, indices, data, k):  # pragma: no cover - compiled
    keep = np.zeros(data.shape[0], np.bool_)
    for r in range(indptr.shape[0] - 1):
        lo, hi = indptr[r], indptr[r + 1]
        if hi - lo <= k:
            keep[lo:hi] = True
            continue
        # the k-th largest value by selection (not a sort: rows hold thousands of entries); over column-sorted
        # entries, ties with it go to the lowest columns
        kth = -np.partition(-data[lo:hi], k - 1)[k - 1]
        ties = k
        for i in range(lo, hi):
            if data[i] > kth:
                ties -= 1
        for i in range(lo, hi):
            if data[i] > kth:
                keep[i] = True
            elif data[i] == kth and ties > 0:
                keep[i] = True
                ties -= 1
    return keep


def top_k_rows(m: sp.csr_matrix, k: int) -> sp.csr_matrix:
    """Keep the k largest entries of each row (ties broken by column, lowest first)."""
    m = m.tocsr()
    m.eliminate_zeros()
    m.sort_indices()
    if m.nnz == 0 or np.diff(m.indptr).max() <= k:
        return m
    keep = _top_k_mask(m.indptr.astype(np.int64), m.indices, m.data, k)
    indptr = np.zeros(m.shape[0] + 1, np.int64)
    np.cumsum(np.minimum(np.diff(m.indptr), k), out=indptr[1:])
    return sp.csr_matrix((m.data[keep], m.indices[keep], indptr), shape=m.shape)


@numba.njit(cache=True, nogil=True)
def _fold_rows(centres, f_ptr, f_idx, f_val, d_ptr, d_idx, d_val, t_ptr, t_idx, t_val, t_where, tp_ptr, tp_idx,
               tp_val, n_frag, hub, window):  # pragma: no cover - compiled
    """(F D F^T) triples for rows with fragment ids `centres`: F rows (over D's sources), D (sources x nodes),
    F^T (nodes x fragments, sorted; as graph.csr_rows.PatchedRows.arrays() gives it). A node in more than `hub`
    fragments reaches the `window` either side only."""
    acc = np.zeros(n_frag)
    seen = np.zeros(n_frag, np.bool_)
    touched = np.empty(n_frag, np.int64)
    cap = 1024
    out_r = np.empty(cap, np.int64)
    out_c = np.empty(cap, np.int64)
    out_v = np.empty(cap, np.float64)
    n_out = 0
    for r in range(centres.shape[0]):
        n_t = 0
        for a in range(f_ptr[r], f_ptr[r + 1]):
            k = f_idx[a]
            for b in range(d_ptr[k], d_ptr[k + 1]):
                node = d_idx[b]
                w = f_val[a] * d_val[b]
                pn = t_where[node] if t_where.shape[0] > 0 else -1
                if pn >= 0:
                    lo, hi = tp_ptr[pn], tp_ptr[pn + 1]
                else:
                    lo, hi = t_ptr[node], t_ptr[node + 1]
                if hi - lo > hub:
                    at = lower_bound(tp_idx, lo, hi, centres[r]) if pn >= 0 else lower_bound(t_idx, lo, hi,
                                                                                                centres[r])
                    lo, hi = max(lo, at - window), min(hi, at + window + 1)
                for e in range(lo, hi):
                    if pn >= 0:
                        j, tv = tp_idx[e], tp_val[e]
                    else:
                        j, tv = t_idx[e], t_val[e]
                    if not seen[j]:
                        seen[j] = True
                        touched[n_t] = j
                        n_t += 1
                    acc[j] += w * tv
        if n_out + n_t > cap:
            cap = max(2 * cap, n_out + n_t)
            out_r = np.concatenate((out_r[:n_out], np.empty(cap - n_out, np.int64)))
            out_c = np.concatenate((out_c[:n_out], np.empty(cap - n_out, np.int64)))
            out_v = np.concatenate((out_v[:n_out], np.empty(cap - n_out, np.float64)))
        for q in range(n_t):
            j = touched[q]
            out_r[n_out] = r
            out_c[n_out] = j
            out_v[n_out] = acc[j]
            n_out += 1
            acc[j] = 0.0
            seen[j] = False
    return out_r[:n_out], out_c[:n_out], out_v[:n_out]


def _csr_arrays(m: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return m.indptr, m.indices, m.data.astype(np.float64, copy=False)  # int32 or int64 indices: numba compiles each


def structure_rows(rows: np.ndarray, fragment_nodes: sp.csr_matrix | PatchedRows,
                   node_fragments: sp.csr_matrix | PatchedRows | None, costs: sp.csr_matrix | PatchedRows,
                   cutoff: float, max_reach: int = 0, sizes: np.ndarray | None = None,
                   reached: list[np.ndarray] | None = None, row_chunk: int = ROW_CHUNK) -> sp.csr_matrix:
    """Eq. 8 for the given fragment rows against every fragment: (len(rows), n_fragments), diagonal kept.

    `fragment_nodes` is the fragment x node membership matrix; `node_fragments` its transpose (node x fragment,
    its rows sorted where it is patched), passed in when the caller keeps one, else computed here. Where `reached`
    is given, the nodes that the rows' nodes reach are appended to it (`reached_nodes` of those nodes, found on the
    way). `row_chunk` rows are folded at once (callers that run several at once give each a share)."""
    f = patched(fragment_nodes)
    n_frag = f.shape[0]
    if sizes is None:  # the fragments' owned lengths, as a caller that keeps F keeps them
        sizes = np.asarray(f.merged().sum(axis=1)).ravel()
    if node_fragments is None:
        node_fragments = f.merged().T.tocsr()
    t_arrays = patched(node_fragments).arrays()  # rows sorted: hub nodes find the row's neighbourhood by search
    blocks = []
    for lo in range(0, len(rows), row_chunk):
        chunk = np.asarray(rows[lo:lo + row_chunk], dtype=np.int64)
        sub = f.rows(chunk)
        sources = np.unique(sub.indices)
        sub = sub[:, sources].tocsc()  # columns re-indexed to the sources' order
        num = sp.csr_matrix((len(chunk), n_frag))
        for at, src in source_chunks(sources):
            strengths = max_product_strengths(costs, src, cutoff, max_reach)  # (len(src), n_nodes)
            if reached is not None:
                reached.append(np.unique(strengths.indices))
            part = sub[:, at:at + len(src)].tocsr()
            r, c, v = _fold_rows(chunk, *_csr_arrays(part), *_csr_arrays(strengths), *t_arrays, n_frag,
                                 FANOUT_HUB, FANOUT_WINDOW)
            num = num + sp.csr_matrix((v, (r, c)), shape=(len(chunk), n_frag))  # (chunk, n_frag)
        num = num.tocsr()
        num.sort_indices()
        r = np.repeat(np.arange(len(chunk)), np.diff(num.indptr))
        denom = sizes[chunk][r] * sizes[num.indices]
        num.data = np.divide(num.data, denom, out=np.zeros_like(num.data), where=denom > 0)
        blocks.append(num)
    if not blocks:
        return sp.csr_matrix((0, n_frag))
    return sp.vstack(blocks, format="csr")


def context_rows(rows: np.ndarray, window_positions: dict[int, list[tuple[str, int]]],
                 file_windows: dict[str, np.ndarray], n_frag: int, weight: float, cutoff: float) -> sp.csr_matrix:
    """Eq. 7: weight ** |p_i - p_j| for windows p of one file (max over a fragment's locations)."""
    reach = int(np.floor(np.log(cutoff) / np.log(weight))) if weight > 0 else 0
    r_idx, c_idx, vals = [], [], []
    for out_row, frag in enumerate(rows.tolist()):
        for path, pos in window_positions.get(frag, ()):
            order = file_windows[path]
            for other in range(max(0, pos - reach), min(len(order), pos + reach + 1)):
                if other != pos:
                    r_idx.append(out_row)
                    c_idx.append(order[other])
                    vals.append(weight ** abs(other - pos))
    m = sp.coo_matrix((vals, (r_idx, c_idx)), shape=(len(rows), n_frag)).tocsr()
    m.sum_duplicates()
    return _max_duplicates(r_idx, c_idx, vals, (len(rows), n_frag)) if len(vals) != m.nnz else m


def _max_duplicates(r, c, v, shape) -> sp.csr_matrix:
    r, c, v = np.asarray(r), np.asarray(c), np.asarray(v, dtype=np.float64)
    order = np.lexsort((-v, c, r))
    r, c, v = r[order], c[order], v[order]
    first = np.ones(len(r), dtype=bool)
    first[1:] = (r[1:] != r[:-1]) | (c[1:] != c[:-1])
    return sp.csr_matrix((v[first], (r[first], c[first])), shape=shape)


def combine(structure: sp.csr_matrix, context: sp.csr_matrix | None, how: str) -> sp.csr_matrix:
    if context is None:
        return structure
    if how == "sum":
        return (structure + context).tocsr()
    return structure.maximum(context).tocsr()


def drop_diagonal(block: sp.csr_matrix, rows: np.ndarray) -> sp.csr_matrix:
    block = block.tocoo()
    keep = rows[block.row] != block.col
    return sp.csr_matrix((block.data[keep], (block.row[keep], block.col[keep])), shape=block.shape)
