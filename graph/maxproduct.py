"""Max-product path strength between graph nodes: Dijkstra on -log(w), bounded by a strength cutoff.

Why numba and not `scipy.sparse.csgraph.dijkstra`: csgraph returns a dense row of length N per source even with
`limit=`, so a full pass costs O(N^2) memory traffic (measured on diffusers, 37k nodes: see README). With a
cutoff each source only reaches a small neighbourhood; this kernel touches only that and emits sparse triples.

Hubs relay locally. A node with more than `HUB_DEGREE` neighbours (a module root with thousands of top-level
statements, a helper called from thousands of places, a folder of thousands of files) passes a path on only to
the `HUB_WINDOW` neighbours either side, in node-id order, of the node the path came from and of the hub itself.
Ids follow parse order, so a module root relays a statement to the statements nearest it in the file and to its
file node and first statements (the imports); a popular definition relays a caller to the callers nearest it and
to its own parent and body. Without this every path through a hub relaxes all its edges: a file of 20k top-level
statements cost 20k x 20k steps (19 s). A hub that is itself the source still reaches every neighbour, and nodes
of degree <= `HUB_DEGREE` relay to all of theirs, so graphs without hubs get exactly the max-product strengths.
"""

from __future__ import annotations

import contextlib
import mmap
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import numba
import numpy as np
import scipy.sparse as sp

from graph.csr_rows import PatchedRows, patched

# Above HUB_DEGREE neighbours a node is a hub (rare in ordinary code: the largest in diffusers has 265); a hub
# relays a path to HUB_WINDOW neighbours either side of the incoming node and of itself (4 x 64 + 1 at most).
HUB_DEGREE = 1024
HUB_WINDOW = 64
# Sources per kernel call where callers keep only a reduction of the rows: each source emits up to `max_reach`
# triples, so 100k sources at once (one file of 100k statements) held 25M of them (over 1 GB).
SOURCE_CHUNK = 8192


@numba.njit(cache=True, nogil=True)
def lower_bound(arr, lo, hi, x):  # pragma: no cover - compiled
    """The first position in arr[lo:hi] (sorted) whose value is >= x (hi when none)."""
    while lo < hi:
        mid = (lo + hi) // 2
        if arr[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


@numba.njit(cache=True, nogil=True)
def _bounded_dijkstra(indptr, indices, costs, where, p_indptr, p_indices, p_costs,  # pragma: no cover - compiled
                      sources, limit, max_settled, window, hub_degree, dist, came, touched):
    # the adjacency as graph.csr_rows.PatchedRows.arrays() gives it: row u is the patch's row where[u] when that is
    # >= 0 (rows an edit made again), else the base's row u
    # work arrays of at least the graph's size: came[v] is 0 while v is not reached (handed back so), -1 for the
    # source, else 1 + the node v's tentative distance came from; dist[v] is that distance, read only where came[v]
    # is not 0 (see `_work_arrays`: zeros, so that only the pages a call reaches are ever resident); touched
    cap = max(16, sources.shape[0] * 32)
    out_s = np.empty(cap, np.int64)
    out_t = np.empty(cap, np.int64)
    out_d = np.empty(cap, np.float64)
    n_out = 0
    # A binary min-heap of (distance, node) with lazy deletion: a node whose distance improves is pushed again
    # rather than moved (numba has no decrease-key), and the stale entry is skipped when popped (`d > dist[u]`).
    hcap = 1024
    heap_d = np.empty(hcap, np.float64)
    heap_v = np.empty(hcap, np.int64)
    # after each source only the entries of `came` it touched are reset (`touched`), so a source costs what it
    # reaches, not O(n).
    for si in range(sources.shape[0]):
        s = sources[si]
        n_touch = 0
        dist[s] = 0.0
        came[s] = -1
        touched[n_touch] = s
        n_touch += 1
        heap_d[0] = 0.0
        heap_v[0] = s
        hsize = 1
        settled = 0
        while hsize > 0 and settled < max_settled:
            d = heap_d[0]
            u = heap_v[0]
            hsize -= 1
            if hsize > 0:  # sift the last element down from the root
                ld = heap_d[hsize]
                lv = heap_v[hsize]
                i = 0
                while True:
                    c = 2 * i + 1
                    if c >= hsize:
                        break
                    if c + 1 < hsize and heap_d[c + 1] < heap_d[c]:
                        c += 1
                    if heap_d[c] < ld:
                        heap_d[i] = heap_d[c]
                        heap_v[i] = heap_v[c]
                        i = c
                    else:
                        break
                heap_d[i] = ld
                heap_v[i] = lv
            if d > dist[u]:
                continue
            if n_out == cap:
                cap *= 2
                out_s = np.concatenate((out_s, np.empty(cap - n_out, np.int64)))
                out_t = np.concatenate((out_t, np.empty(cap - n_out, np.int64)))
                out_d = np.concatenate((out_d, np.empty(cap - n_out, np.float64)))
            out_s[n_out] = si
            out_t[n_out] = u
            out_d[n_out] = d
            n_out += 1
            settled += 1
            # neighbours to relay to: [lo0, hi0) and [lo1, hi1) (the whole row unless u is a hub)
            pu = where[u] if where.shape[0] > 0 else -1
            if pu >= 0:
                lo0, hi0 = p_indptr[pu], p_indptr[pu + 1]
            else:
                lo0, hi0 = indptr[u], indptr[u + 1]
            lo1, hi1 = hi0, hi0
            if hi0 - lo0 > hub_degree and came[u] > 0:  # the row is sorted by neighbour id
                if pu >= 0:
                    at, own = lower_bound(p_indices, lo0, hi0, came[u] - 1), lower_bound(p_indices, lo0, hi0, u)
                else:
                    at, own = lower_bound(indices, lo0, hi0, came[u] - 1), lower_bound(indices, lo0, hi0, u)
                lo1, hi1 = max(lo0, own - window), min(hi0, own + window)
                lo0, hi0 = max(lo0, at - window), min(hi0, at + window + 1)
                if lo1 < hi0 and lo0 < hi1:  # overlapping windows: one range
                    lo0, hi0 = min(lo0, lo1), max(hi0, hi1)
                    lo1 = hi1
            n0 = hi0 - lo0
            for k in range(n0 + hi1 - lo1):
                e = lo0 + k if k < n0 else lo1 + k - n0
                if pu >= 0:
                    v, ce = p_indices[e], p_costs[e]
                else:
                    v, ce = indices[e], costs[e]
                nd = d + ce
                if nd <= limit and (came[v] == 0 or nd < dist[v]):
                    if came[v] == 0:
                        touched[n_touch] = v
                        n_touch += 1
                    dist[v] = nd
                    came[v] = u + 1
                    if hsize == hcap:
                        hcap *= 2
                        heap_d = np.concatenate((heap_d, np.empty(hcap - hsize, np.float64)))
                        heap_v = np.concatenate((heap_v, np.empty(hcap - hsize, np.int64)))
                    i = hsize  # sift up
                    hsize += 1
                    while i > 0:
                        p = (i - 1) // 2
                        if heap_d[p] > nd:
                            heap_d[i] = heap_d[p]
                            heap_v[i] = heap_v[p]
                            i = p
                        else:
                            break
                    heap_d[i] = nd
                    heap_v[i] = v
        for t in range(n_touch):
            came[touched[t]] = 0
    return out_s[:n_out], out_t[:n_out], out_d[:n_out]


_spare: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # one set of work arrays not in use, at most
_spare_lock = threading.Lock()


def _zeros(n: int, dtype: type) -> np.ndarray:
    """n zeros in pages of their own, resident only once written (glibc serves a few MB from its heap, where calloc
    may clear, and so map, every page), given back by `release_work_pages`."""
    size = max(n * np.dtype(dtype).itemsize, 1)
    try:
        pages = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    except (AttributeError, OSError, ValueError):  # no such map here (Windows)
        return np.zeros(n, dtype)
    return np.frombuffer(pages, dtype, n)


@contextmanager
def _work_arrays(n: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The kernel's per-node work arrays: the kernel leaves them as it found them (`came` all zeros), so one set is
    kept between calls and an update of a large graph does not clear three arrays of its size on every call (a call
    beside a running one gets its own). Zeros from fresh pages: a request's call reaches a few thousand nodes, and
    only their pages are resident (a language server kept 36 MB resident for a 3-million-node graph when the
    arrays were filled)."""
    with _spare_lock:
        arrays = _spare.pop() if _spare and len(_spare[0][0]) >= n else None
    if arrays is None:
        size = max(n, 1024)
        # node ids as int32 (a graph of 2**31 nodes is far past what an index holds): 24 MB less per 3 million nodes
        arrays = (_zeros(size, np.float64), _zeros(size, np.int32), _zeros(size, np.int32))
    try:
        yield arrays
    finally:
        with _spare_lock:
            if not _spare or len(_spare[0][0]) < len(arrays[0]):
                _spare[:] = [arrays]


def release_work_pages() -> None:
    """Give the pages of the kept work arrays back to the system (they read as zeros again, as the kernel needs
    them): after a burst of edits, whose reach touched many of them."""
    with _spare_lock:
        for arrays in _spare:
            for a in arrays:
                pages = a.base.obj if isinstance(a.base, memoryview) else None
                if isinstance(pages, mmap.mmap):
                    with contextlib.suppress(OSError, ValueError, AttributeError):  # a hint (no such call: kept)
                        pages.madvise(mmap.MADV_DONTNEED)


def max_product_strengths(adjacency: sp.csr_matrix | PatchedRows, sources: np.ndarray, cutoff: float,
                          max_reach: int = 0) -> sp.csr_matrix:
    """Strength of the strongest path from each source to every node it reaches with strength >= cutoff.

    `max_reach` > 0 keeps only the strongest `max_reach` nodes per source (Dijkstra settles them in order of
    strength): it bounds hubs, e.g. a helper called from thousands of places, whose neighbourhood would
    otherwise make every caller related to every other. Hubs relay only locally (`HUB_WINDOW`, see the module
    docstring), whatever `max_reach` is.

    `adjacency` holds edge costs -log(w) (an explicit 0 is a weight-1 edge), its rows sorted where it is patched.
    Returns a (len(sources), N) CSR matrix of strengths in [cutoff, 1] (a path of exactly the cutoff's strength is
    kept), the source itself included with strength 1.
    """
    sources = np.ascontiguousarray(sources, dtype=np.int64)
    n = adjacency.shape[0]
    if len(sources) == 0:
        return sp.csr_matrix((0, n), dtype=np.float64)
    # the index arrays as scipy keeps them (int32 or int64: numba compiles each): a copy would cost O(edges) per call
    with _work_arrays(n) as work:
        s, t, d = _bounded_dijkstra(*patched(adjacency).arrays(), sources, -np.log(cutoff),
                                    max_reach if max_reach > 0 else np.iinfo(np.int64).max, HUB_WINDOW, HUB_DEGREE,
                                    *work)
    # the kernel emits sources in order, so `s` is already sorted: build CSR directly
    indptr = np.zeros(len(sources) + 1, dtype=np.int64)
    np.cumsum(np.bincount(s, minlength=len(sources)), out=indptr[1:])
    return sp.csr_matrix((np.exp(-d), t, indptr), shape=(len(sources), n))


def source_chunks(sources: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """(offset, run) for runs of `SOURCE_CHUNK` sources, for callers that reduce the strengths run by run."""
    return [(lo, sources[lo:lo + SOURCE_CHUNK]) for lo in range(0, len(sources), SOURCE_CHUNK)]


def reached_nodes(adjacency: sp.csr_matrix | PatchedRows, sources: np.ndarray, cutoff: float,
                  max_reach: int = 0) -> np.ndarray:
    """The nodes some source reaches with strength >= cutoff (sorted, unique), in bounded memory."""
    parts = [np.unique(max_product_strengths(adjacency, chunk, cutoff, max_reach).indices)
             for _, chunk in source_chunks(np.asarray(sources, dtype=np.int64))]
    return np.unique(np.concatenate(parts)).astype(np.int64) if parts else np.zeros(0, np.int64)
