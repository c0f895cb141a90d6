"""Fragment relations and their upkeep: the fragment x node matrix F, the relation matrix W (Eq. 8, top k per
row), the rows an edit left stale, and the graph queries that read F (query-side strengths, explanations).

It reads the index's files, fragments, graph and settings (through the `Index` it belongs to, since a load
replaces those) and owns everything derived from them for relations. An update (`note_update`) recomputes the
changed windows' rows, or defers them, and remembers which graph nodes were near the change; `refresh` later
recomputes every row within reach of those nodes, in slices if asked, after which W equals a full rebuild's.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import dijkstra

from graph.csr_rows import PatchedRows, drop_columns, patched, replace_rows, with_columns
from graph.maxproduct import max_product_strengths, reached_nodes
from graph.relations import ROW_CHUNK, combine, context_rows, drop_diagonal, structure_rows, top_k_rows
from repocomp.index import heap
from repocomp.index.fragments import window_spans

if TYPE_CHECKING:
    from repocomp.index.index import Index
    from repocomp.index.records import FileEntry

Progress = Callable[[int, int, str], None]  # (done, total, phase)
Triplets = tuple[np.ndarray, np.ndarray, np.ndarray]  # (fragment, node, owned length) of F's entries
_ROWS_PER_BLOCK = 4096  # relation rows computed per sparse block (bounds the temporary matrices)
_PATCHED_ENTRIES = 1 << 20  # W is made again once its patched rows hold more entries than this and 1/8 of W's


class RelationUpkeep:
    def __init__(self, index: Index) -> None:
        self.index = index
        # per row, the top-k relations of Eq. 8 (what is stored; the cut makes it asymmetric): `_made` as last made,
        # the rows computed since (`_patched_rows`, rows of `_patched`) and the fragments removed since (`_dead`),
        # applied when W is next read (see `relations`)
        self._made = sp.csr_matrix((0, 0), dtype=np.float32)
        self._patched_rows = np.zeros(0, np.int64)
        self._patched = sp.csr_matrix((0, 0), dtype=np.float32)
        self._dead = np.zeros(0, np.int64)
        self._n = 0
        self._making = threading.Lock()
        self._symmetric: tuple[sp.csr_matrix, int, tuple[int, int], sp.csr_matrix] | None = None
        # F: fragment x node owned lengths (Eq. 8's len), and its transpose once needed; an edit patches their rows
        self.fragment_nodes = PatchedRows(sp.csr_matrix((0, 0)))
        self._fragment_nodes_t: PatchedRows | None = None
        self._sizes = np.zeros(0)  # F's row sums: each fragment's owned length (Eq. 8's normaliser)
        # graph nodes near changes whose relation rows still await `refresh`
        self.pending_reached = np.zeros(0, np.int64)  # reached from changes (in the graph before them, or after)
        self.pending_seeds = np.zeros(0, np.int64)  # changed nodes, to reach from in the current graph
        self.pending_rows = np.zeros(0, np.int64)  # fragment rows found stale, not recomputed yet
        # rows computed since the graph last changed: current, whatever reach finds them stale for (an update's own
        # windows are computed at once and also lie within reach of its change)
        self._fresh = np.zeros(0, np.int64)
        # while set (a save follows at once), W is made again only when read, F and its transpose keep their
        # patched rows beside them however many
        self.folds_deferred = False

    # -- F: the fragment x node matrix ---------------------------------------------------------------------------
    def file_triplets(self, entries: list[FileEntry]) -> Triplets:
        """F's entries for these files: what each window's lines give each syntax node."""
        cfg = self.index.config.fragments
        rows, cols, vals = [], [], []
        for entry in entries:
            parsed = entry.parsed
            for frag_id, (start, end) in zip(entry.windows, window_spans(parsed.n_lines, cfg.window, cfg.stride)):
                keep = parsed.line_len[start:end] > 0
                rows.append(np.full(int(keep.sum()), frag_id))
                cols.append(entry.node_ids[parsed.line_owner[start:end][keep]])
                vals.append(parsed.line_len[start:end][keep])
        if not rows:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
        return np.concatenate(rows), np.concatenate(cols), np.concatenate(vals).astype(np.float64)

    def rebuild_fragment_nodes(self) -> None:
        r, c, v = self.file_triplets(list(self.index.files.values()))
        shape = (len(self.index.fragments), self.index.graph.n_ids)
        self.set_fragment_nodes(sp.csr_matrix((v, (r, c)), shape=shape))  # duplicates summed: locations add up

    def set_fragment_nodes(self, f: sp.csr_matrix, transposed: sp.csr_matrix | PatchedRows | None = None,
                           sizes: np.ndarray | None = None) -> None:
        """Take `f` as F (a stored one, or made from the files), its transpose where it is stored too, and its row
        sums where they are made already."""
        self.fragment_nodes = PatchedRows(f)
        self._fragment_nodes_t = None if transposed is None else patched(transposed)
        self._sizes = np.asarray(f.sum(axis=1)).ravel() if sizes is None else sizes

    def patch_fragment_nodes(self, removed: Triplets, added: Triplets) -> None:
        """F minus the changed files' old windows plus their new ones: only the rows (and, where F's transpose is
        kept, the columns) those windows touch are made again."""
        shape = (len(self.index.fragments), self.index.graph.n_ids)
        r, c = np.concatenate((removed[0], added[0])), np.concatenate((removed[1], added[1]))
        v = np.concatenate((-removed[2], added[2]))
        merge = not self.folds_deferred
        self.fragment_nodes, rows, new = _patch_rows(self.fragment_nodes, r, c, v, shape, merge)
        sizes = np.zeros(shape[0])
        sizes[:len(self._sizes)] = self._sizes[:shape[0]]
        sizes[rows] = np.asarray(new.sum(axis=1)).ravel()
        self._sizes = sizes
        if self._fragment_nodes_t is not None:
            self._fragment_nodes_t = _patch_rows(self._fragment_nodes_t, c, r, v, shape[::-1], merge)[0]

    @property
    def node_fragments(self) -> PatchedRows:
        """F transposed (node x fragment, rows sorted), made when first needed after F was set."""
        if self._fragment_nodes_t is None:
            t = self.fragment_nodes.merged().T.tocsr()
            t.sort_indices()
            self._fragment_nodes_t = PatchedRows(t)
        return self._fragment_nodes_t

    # -- W: computing rows ---------------------------------------------------------------------------------------
    def _block(self, rows: np.ndarray, reached: list[np.ndarray] | None = None, row_chunk: int = ROW_CHUNK
               ) -> sp.csr_matrix:
        index, rel = self.index, self.index.config.relations
        block = structure_rows(rows, self.fragment_nodes, self.node_fragments, index.graph.cost_matrix(),
                               rel.cutoff, rel.max_reach, self._sizes, reached, row_chunk)
        if rel.context_weight > 0:
            stride = index.config.fragments.stride
            positions = {int(r): [(loc.path, loc.start_line // stride) for loc in index.fragments[r].locations]
                         for r in rows if index.fragments[r] is not None}
            file_windows = {p: index.files[p].windows for locs in positions.values() for p, _ in locs}
            ctx = context_rows(rows, positions, file_windows, len(index.fragments), rel.context_weight, rel.cutoff)
            block = combine(block, ctx, rel.context_combine)
        return top_k_rows(drop_diagonal(block, rows), rel.top_k).astype(np.float32)

    def _blocks(self, rows: np.ndarray, reached: list[np.ndarray] | None, progress: Progress | None
                ) -> list[sp.csr_matrix]:
        """These rows of W in blocks of `_ROWS_PER_BLOCK`, in order, up to `[index] threads` blocks computed at once
        (the kernels, most of the time, run outside the interpreter's lock), each folding its share of the rows
        one thread would fold at once."""
        starts = range(0, len(rows), _ROWS_PER_BLOCK)
        threads = min(self.index.config.index.build_cores(), len(starts))

        def block_at(lo: int) -> sp.csr_matrix:
            block = self._block(rows[lo:lo + _ROWS_PER_BLOCK], reached, max(1, ROW_CHUNK // threads))
            if threads > 1:  # each thread's malloc arena kept what its products freed (200 MB more at two threads)
                heap.trim(every_s=0)
            return block

        blocks: list[sp.csr_matrix] = []
        with contextlib.ExitStack() as stack:
            computed: Iterator[sp.csr_matrix] = map(block_at, starts)
            if threads > 1:
                _ = self.node_fragments, self.index.graph.cost_matrix()  # made once, before the threads read them
                pool = stack.enter_context(ThreadPoolExecutor(threads, thread_name_prefix="relations"))
                computed = pool.map(block_at, starts)
            for lo, block in zip(starts, computed):
                blocks.append(block)
                if progress:
                    progress(min(lo + _ROWS_PER_BLOCK, len(rows)), len(rows), "relations")
        return blocks

    def recompute(self, rows: np.ndarray, progress: Progress | None = None) -> None:
        """Replace these rows of W by freshly computed ones (all rows at build time)."""
        self._put_rows(np.unique(np.asarray(rows, dtype=np.int64)), progress)

    def _put_rows(self, rows: np.ndarray, progress: Progress | None = None,
                  dead: np.ndarray | None = None, reached: list[np.ndarray] | None = None,
                  blocks: list[sp.csr_matrix] | None = None) -> None:
        """These rows (sorted, unique) of W computed afresh (or as `blocks` computed them), and the `dead`
        fragments' rows and columns gone (the nodes their nodes reach appended to `reached` where given)."""
        n = len(self.index.fragments)
        dead = np.zeros(0, np.int64) if dead is None else dead
        blocks = self._blocks(rows, reached, progress) if blocks is None else blocks
        blocks.append(sp.csr_matrix((len(dead), n), dtype=np.float32))
        new = sp.vstack(blocks, format="csr", dtype=np.float32)
        new.eliminate_zeros()
        new.sort_indices()
        rows = np.concatenate((rows, dead))
        if len(self._patched_rows):  # the rows patched before and not again
            earlier = np.flatnonzero(~np.isin(self._patched_rows, rows))
            rows = np.concatenate((self._patched_rows[earlier], rows))
            new = sp.vstack([with_columns(self._patched[earlier], n), new], format="csr", dtype=np.float32)
        order = np.argsort(rows, kind="stable")
        self._patched_rows, self._patched, self._n = rows[order], new[order], n
        self._dead = np.union1d(self._dead, dead)
        if not self.folds_deferred and self._patched.nnz > max(_PATCHED_ENTRIES, self._made.nnz // 8):
            self._make()

    @property
    def relations(self) -> sp.csr_matrix:
        """W, made again from the last one and the rows patched since when read after a change.

        An edit recomputes a few rows; writing them into W at once copied all of W (170 MB in a 7.6-million-line
        monorepo, most of it otherwise read in place from the index file) on every keystroke. W is read only to
        save it and when FragRel's Eq. 9 is on, so the patches wait for that (or until they grow large)."""
        if self._changed_since_made():
            with self._making:  # readers run concurrently (the server's read lock): one makes it, once
                if self._changed_since_made():
                    self._make()
        return self._made

    @relations.setter
    def relations(self, w: sp.csr_matrix) -> None:
        self._made, self._n = w, w.shape[0]  # W first: a reader that finds no patches reads this one
        self._patched_rows, self._dead = np.zeros(0, np.int64), np.zeros(0, np.int64)
        self._patched = sp.csr_matrix((0, self._n), dtype=np.float32)

    def relation_blocks(self, rows_per_block: int = 1 << 16) -> Iterator[sp.csr_matrix]:
        """W as consecutive blocks of rows, the patched rows written in and the removed fragments' columns dropped
        block by block: a save writes W so, never made whole beside the patches (a build's last batch: 400 MB)."""
        made, n = self._made, self._n
        if not self._changed_since_made():
            yield made
            return
        for lo in range(0, n, rows_per_block):
            hi = min(n, lo + rows_per_block)
            block = with_columns(made[min(lo, made.shape[0]):min(hi, made.shape[0])], n)
            block.resize((hi - lo, n))
            at = slice(*np.searchsorted(self._patched_rows, [lo, hi]))
            block = replace_rows(block, self._patched_rows[at] - lo, with_columns(self._patched[at], n), (hi - lo, n))
            yield drop_columns(block, self._dead)

    def relation_count(self) -> int:
        """W's entries, counted without making it (at the end of a build, W made whole beside a batch's patched
        rows was the build's peak: 400 MB more in a 7.6-million-line monorepo)."""
        if not self._changed_since_made():
            return int(self._made.nnz)
        made, live = self._made, np.ones(self._n, bool)
        live[self._dead] = False
        replaced = np.zeros(made.shape[0], bool)
        replaced[self._patched_rows[self._patched_rows < made.shape[0]]] = True
        count = int(np.count_nonzero(live[self._patched.indices]))
        for lo in range(0, made.shape[0], 1 << 16):  # a block of rows at a time: W's entries are read in place
            ptr = made.indptr[lo:lo + (1 << 16) + 1]
            kept = np.repeat(~replaced[lo:lo + len(ptr) - 1], np.diff(ptr))
            count += int(np.count_nonzero(kept & live[made.indices[ptr[0]:ptr[-1]]]))
        return count

    def _changed_since_made(self) -> bool:
        return len(self._patched_rows) > 0 or len(self._dead) > 0 or self._made.shape != (self._n, self._n)

    def _make(self) -> None:
        """Write the patched rows into W (one pass over its entries however many rows changed), drop the removed
        fragments' columns."""
        n = self._n
        w = replace_rows(self._made, self._patched_rows, with_columns(self._patched, n), (n, n))
        self.relations = drop_columns(w, self._dead)

    def reach(self, costs: sp.csr_matrix, seeds: np.ndarray) -> np.ndarray:
        """Graph nodes within the cutoff of `seeds` under `costs` (the graph before or after a change)."""
        if len(seeds) == 0:
            return np.zeros(0, np.int64)
        rel = self.index.config.relations
        return reached_nodes(costs, np.unique(seeds), rel.cutoff, rel.max_reach)

    # -- W: after an update --------------------------------------------------------------------------------------
    def note_update(self, touched: np.ndarray, old_reach: np.ndarray, new_seeds: np.ndarray, defer: bool) -> None:
        """After the files changed: `touched` fragments (windows removed or added), nodes reached from the change
        in the old graph, and the changed nodes of the new one.

        The touched rows are recomputed now (or left to `refresh` with `defer`); other rows within reach of the
        change wait for `refresh`, because a popular definition can put thousands of rows within reach of one
        edit. A removed fragment keeps no row and appears in no column."""
        alive = self.index.fragments.alive_mask()
        dead = np.unique(touched[~alive[touched]])
        if defer:
            self.pending_rows = np.union1d(self.pending_rows, touched[alive[touched]])
            now = np.zeros(0, np.int64)
        else:
            now = np.unique(touched[alive[touched]])
        reached: list[np.ndarray] = []
        self._put_rows(now, dead=dead, reached=reached)
        self._fresh = now
        # the touched rows' nodes (most of a batch of new files' seeds) were just reached from: `refresh` reaches
        # from the other seeds only (the same rows found stale; a reach from every node of a build's batch again
        # cost as much as computing its rows)
        self.pending_reached = np.unique(np.concatenate([self.pending_reached, old_reach, *reached]))
        self.pending_seeds = np.union1d(self.pending_seeds,
                                        np.setdiff1d(new_seeds, self.fragment_nodes.rows(now).indices))

    @property
    def stale(self) -> bool:
        return len(self.pending_reached) > 0 or len(self.pending_seeds) > 0 or len(self.pending_rows) > 0

    def stale_rows(self) -> np.ndarray:
        """The rows earlier updates left stale, the nodes near them found as rows now (sorted, unique): what
        `refresh` recomputes, and what a partial build's save keeps for the refresh at its end. Found after each
        batch of a build, since the next one's rows are the only ones then known to be current (`_fresh`)."""
        if len(self.pending_reached) or len(self.pending_seeds):
            new_reach = self.reach(self.index.graph.cost_matrix(), self.pending_seeds.astype(np.int64))
            nodes = np.union1d(self.pending_reached, new_reach).astype(np.int64)
            nodes = nodes[nodes < self.fragment_nodes.shape[1]]
            rows = np.unique(self.node_fragments.rows(nodes).indices).astype(np.int64)
            self.pending_rows = np.union1d(self.pending_rows, rows)
            self.pending_reached = np.zeros(0, np.int64)
            self.pending_seeds = np.zeros(0, np.int64)
        pending = self.pending_rows[self.pending_rows < len(self.index.fragments)]
        pending = pending[self.index.fragments.alive_mask()[pending]]  # a row that died since needs nothing
        self.pending_rows = np.setdiff1d(pending, self._fresh, assume_unique=True)
        return self.pending_rows

    def refresh(self, max_rows: int | None = None, progress: Progress | None = None,
                computing: Callable[[], AbstractContextManager[object]] | None = None) -> int:
        """Recompute relation rows that earlier updates left stale, at most `max_rows` of them (None: all);
        returns how many were redone. `max_rows` bounds the work of one call, so a caller holding a lock (the
        language server's background upkeep) can do it in slices; the rows are found and computed inside
        `computing()` (the server lets requests read meanwhile: W and F are only read there), then written."""
        with computing() if computing is not None else contextlib.nullcontext():
            pending = self.stale_rows()
            now, self.pending_rows = (pending, pending[:0]) if max_rows is None else (pending[:max_rows],
                                                                                      pending[max_rows:])
            blocks = self._blocks(now, None, progress) if len(now) else []
        if len(now):
            self._put_rows(now, progress, blocks=blocks)
            self._fresh = np.union1d(self._fresh, now)
        return len(now)

    def compact(self, keep: np.ndarray, fragment_map: np.ndarray, node_map: np.ndarray) -> None:
        """Follow a renumbering: `keep` = old fragment ids kept; the maps give each old id its new one (or -1)."""
        self.set_fragment_nodes(self.fragment_nodes.rows(keep)[:, np.flatnonzero(node_map >= 0)].tocsr())
        self.relations = self.relations[keep][:, keep].tocsr()

        def remap(ids: np.ndarray, table: np.ndarray) -> np.ndarray:
            ids = ids[ids < len(table)].astype(np.int64)
            return np.unique(table[ids][table[ids] >= 0])

        self.pending_rows = remap(self.pending_rows, fragment_map)
        self._fresh = remap(self._fresh, fragment_map)
        # a dead node reaches no fragment any more: dropping it from the pending sets changes nothing
        self.pending_reached = remap(self.pending_reached, node_map)
        self.pending_seeds = remap(self.pending_seeds, node_map)

    # -- reading W and F -----------------------------------------------------------------------------------------
    @property
    def symmetric(self) -> sp.csr_matrix:
        """W for Eq. 9: the stored relations with an entry kept when either of its two fragments keeps it.

        Eq. 8 is symmetric, but each row keeps only its top k, so w_ij and w_ji can differ; Eq. 9 reads a fragment's
        row for its neighbours and a lender's row for what it lends, and both must be the same number. Made once
        per change of the stored matrix (about 5 ms for diffusers), when a request first needs it."""
        w = self.relations
        made = self._made_symmetric(w)
        if made is None:
            made = sp.vstack(list(_symmetric_blocks(w)), format="csr") if w.shape[0] else w.copy()
            self._symmetric = (w, w.nnz, w.shape, made)
        return made

    def symmetric_blocks(self, rows_per_block: int = 1 << 16) -> Iterator[sp.csr_matrix]:
        """`symmetric` as consecutive blocks of rows, made one at a time when it is not made already: a save writes
        it so (made whole, it held W's transpose, the blocks and their copy at once: 700 MB beside W in a
        7.6-million-line monorepo)."""
        w = self.relations
        made = self._made_symmetric(w)
        yield from [made] if made is not None else _symmetric_blocks(w, rows_per_block)

    def _made_symmetric(self, w: sp.csr_matrix) -> sp.csr_matrix | None:
        cached = self._symmetric
        if cached is None or cached[0] is not w or cached[1] != w.nnz or cached[2] != w.shape:
            return None
        return cached[3]

    def keep_symmetric(self, symmetric: sp.csr_matrix) -> None:
        """Take `symmetric` (stored with the index) as the current W's symmetric matrix instead of making it."""
        w = self.relations
        self._symmetric = (w, w.nnz, w.shape, symmetric)

    def region_strength(self, path: str, start_line: int, end_line: int) -> np.ndarray:
        """Per fragment: the strongest max-product path from a node on lines [start, end) of `path` to one of its
        nodes (0 where none is within the cutoff).

        The query side's relation (beyond the paper). Not Eq. 8's length-weighted average: one call from the
        code being written to a definition is the signal, and averaging it over every node pair of two windows
        drowns it (measured: the average raised definitions far less than the strongest link; see README).
        """
        index = self.index
        out = np.zeros(len(index.fragments), dtype=np.float32)
        entry = index.files.get(path)
        if entry is None or start_line >= end_line:
            return out
        parsed = entry.parsed
        start, end = max(0, start_line), min(end_line, parsed.n_lines)
        keep = parsed.line_len[start:end] > 0
        if not keep.any():
            return out
        sources = np.unique(entry.node_ids[parsed.line_owner[start:end][keep]])
        rel = index.config.relations
        strengths = max_product_strengths(index.graph.cost_matrix(), sources, rel.cutoff, rel.max_reach)
        best = strengths.max(axis=0).tocoo()  # per node: its strongest link to the region
        if best.nnz == 0:
            return out
        touched = (self.node_fragments.rows(best.col) > 0).astype(np.float32)  # reached nodes x fragments
        q = (sp.diags(best.data.astype(np.float32)) @ touched).max(axis=0).toarray().ravel()
        out[: len(q)] = q
        return out

    def edge_types(self, i: int, j: int) -> list[str]:
        """Edge types along the strongest node path joining fragments i and j (for explanations)."""
        a, b = self.fragment_nodes.rows(np.array([i])), self.fragment_nodes.rows(np.array([j]))
        if a.nnz == 0 or b.nnz == 0:
            return []
        graph = self.index.graph
        dist, pred = dijkstra(graph.cost_matrix().merged(), indices=a.indices, return_predecessors=True,
                              limit=-np.log(self.index.config.relations.cutoff))
        score = (a.data[:, None] * b.data[None, :]) * np.exp(-dist[:, b.indices])
        if not np.isfinite(dist[:, b.indices]).any() or score.max() <= 0:
            return []
        si, ti = np.unravel_index(np.argmax(score), score.shape)
        path = [int(b.indices[ti])]
        while path[-1] != a.indices[si]:
            path.append(int(pred[si, path[-1]]))
        types = [graph.edge_type(u, v) for u, v in zip(path, path[1:])]
        return [t for t in types if t is not None] or ["same node"]


def _symmetric_blocks(w: sp.csr_matrix, rows_per_block: int = 1 << 16) -> Iterator[sp.csr_matrix]:
    """max(W, W^T), a block of rows at a time: scipy's maximum of the whole matrices first holds room for the
    entries of both (340 MB beside W and W^T in a 7.6-million-line monorepo)."""
    wt = w.T.tocsr()
    for lo in range(0, w.shape[0], rows_per_block):
        yield w[lo:lo + rows_per_block].maximum(wt[lo:lo + rows_per_block]).tocsr()


def _patch_rows(m: PatchedRows, r: np.ndarray, c: np.ndarray, v: np.ndarray, shape: tuple[int, int], merge: bool
                ) -> tuple[PatchedRows, np.ndarray, sp.csr_matrix]:
    """`m` (grown to `shape`) plus the entries (r, c, v) (repeated ones summed): the sum, the rows they lie in
    (sorted) and those rows of it. The entries are laid over those rows only: a delta of the matrix's size, or its
    transpose, cost a pass over every row of the graph at each keystroke."""
    rows, at = np.unique(r, return_inverse=True)
    delta = sp.csr_matrix((v, (at.ravel(), c)), shape=(len(rows), shape[1]))
    old = m.rows(rows[rows < m.shape[0]])
    old = sp.vstack([old, sp.csr_matrix((int((rows >= m.shape[0]).sum()), old.shape[1]))], format="csr")
    new = (with_columns(old, shape[1]) + delta).tocsr()
    new.eliminate_zeros()
    new.sort_indices()
    return m.replace(rows, new, shape, merge), rows, new
