"""The repository index: files, fragments, code graph, fragment relation matrix W and term index.

`Index.build` makes it from scratch, `Index.open` loads it (rebuilding a corrupt, old or differently configured
one), `update_file`/`remove_file`/`update_files` patch it incrementally: only the relation rows whose node
neighbourhood (within the cutoff) touches a changed node are recomputed, which gives the same matrix as a
full rebuild.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import dijkstra

from graph.code_graph import EDGE_TYPES, CodeGraph
from graph.maxproduct import max_product_strengths, reached_nodes
from graph.parsing import ParsedFile, parse_source
from graph.relations import combine, context_rows, drop_diagonal, structure_rows, top_k_rows
from graph.resolve import Resolver, make_symbols
from repocomp.config import Config, load_config
from repocomp.errors import IndexCorruptError, IndexMissingError, IndexStaleError, IndexUnusableError, RepocompError
from repocomp.fragments import Fragment, Location, window_spans, window_text
from repocomp import index_codec
from repocomp.store import INDEX_FILE, fallback_dir, read_state, write_state
from repocomp.term_index import TermIndex
from repocomp.walk import FileRule, WalkResult, walk_repository

log = logging.getLogger(__name__)

Progress = Callable[[int, int, str], None]  # (done, total, phase)
# compact only past this many dead ids: a small repository's few edits are not worth renumbering for
_MIN_DEAD_IDS = 4096
# settings whose change invalidates a stored index
_STRUCTURAL_SECTIONS = ("index", "fragments", "graph", "relations")


@dataclass
class FileEntry:
    path: str
    language: str
    text: str
    parsed: ParsedFile
    windows: list[int]  # fragment id of each window, in file order
    node_ids: np.ndarray  # global graph id of each local syntax node

    @property
    def lines(self) -> list[str]:
        return self.text.split("\n")


@dataclass
class IndexSummary:
    files: int = 0
    fragments: int = 0
    nodes: int = 0
    edges: dict[str, int] = field(default_factory=dict)
    relation_nonzeros: int = 0
    phases_s: dict[str, float] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    index_bytes: int = 0
    parse_errors: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()}


class Index:
    def __init__(self, root: Path, config: Config):
        self.root = Path(root).resolve()
        self.config = config
        self.files: dict[str, FileEntry] = {}
        self.fragments: list[Fragment | None] = []
        self._by_text: dict[str, int] = {}
        self.graph = CodeGraph(config.graph.__dict__)
        self.resolver = Resolver()
        self.term_index = TermIndex.build([])
        # per row, the top-k relations of Eq. 8 (what is stored; the cut makes it asymmetric)
        self.relations = sp.csr_matrix((0, 0), dtype=np.float32)
        self._symmetric: tuple[sp.csr_matrix, int, tuple[int, int], sp.csr_matrix] | None = None
        self._fnodes = sp.csr_matrix((0, 0))  # fragment x node owned lengths (Eq. 8's len)
        self._fnodes_t: sp.csr_matrix | None = None
        # graph nodes near changes whose relation rows still await `refresh_relations`
        self._pending_old = np.zeros(0, np.int64)  # reached from changes in the graph before them
        self._pending_seeds = np.zeros(0, np.int64)  # changed nodes, to reach from in the current graph
        self._pending_rows = np.zeros(0, np.int64)  # fragment rows found stale, not recomputed yet
        self.summary = IndexSummary()
        self.epoch = 0  # compactions so far (ids before one mean nothing after it)
        self._store_dir: Path | None = None  # set when the index lives in the user's cache instead

    # -- paths ---------------------------------------------------------------------------------------------------
    @property
    def index_dir(self) -> Path:
        """Where the index is stored: `[index] dir`, or the user's cache when that could not be written."""
        if self._store_dir is not None:
            return self._store_dir
        folder = Path(self.config.index.dir)
        return folder if folder.is_absolute() else self.root / folder

    def relpath(self, path: str | Path) -> str:
        """`path` (absolute, or relative to the repository root) as the index names it; outside -> error.

        A symlink keeps its own name, as in the walk: one that leads out of the repository is then left out by
        `FileRule` like in a build, not an error."""
        p = Path(path)
        full = Path(os.path.abspath(p if p.is_absolute() else self.root / p))
        for named in (full.parent.resolve() / full.name, full):  # through the real folders, else as written
            if named.is_relative_to(self.root):
                return named.relative_to(self.root).as_posix()
        raise RepocompError(f"{path} is outside the indexed repository {self.root}")

    # -- construction --------------------------------------------------------------------------------------------
    @classmethod
    def build(cls, root: str | Path, config: Config | None = None, progress: Progress | None = None) -> "Index":
        root = Path(root)
        if not root.exists():
            raise RepocompError(f"{root}: no such directory")
        if not root.is_dir():
            raise RepocompError(f"{root} is a file; give the repository's folder")
        config = config or load_config(root)
        index = cls(root, config)
        phases: dict[str, float] = {}
        t = time.perf_counter()
        walked = walk_repository(index.root, config, index.index_dir)
        phases["walk"] = time.perf_counter() - t

        t = time.perf_counter()
        total = len(walked.files)
        for n, source in enumerate(walked.files):
            index._add_file(source.path, source.language, source.text)
            if progress and (n % 16 == 0 or n + 1 == total):
                progress(n + 1, total, "parse")
        phases["parse"] = time.perf_counter() - t

        t = time.perf_counter()
        for path in index.files:
            index._resolve(path)
        index._rebuild_fragment_nodes()
        index.graph.cost_matrix()
        phases["graph"] = time.perf_counter() - t

        t = time.perf_counter()
        rows = np.flatnonzero(index.alive_mask())
        index.relations = sp.csr_matrix((len(index.fragments), len(index.fragments)), dtype=np.float32)
        index._recompute_rows(rows, progress)
        phases["relations"] = time.perf_counter() - t

        t = time.perf_counter()
        index.term_index = TermIndex.build([f.text if f else None for f in index.fragments])
        phases["term_index"] = time.perf_counter() - t

        index._summarize(walked, phases)
        return index

    def _add_file(self, path: str, language: str, text: str) -> FileEntry:
        parsed = parse_source(text, language)
        nodes = self.graph.set_file(path, parsed)
        self.resolver.set_file(make_symbols(path, parsed))
        entry = FileEntry(path, language, text, parsed, [], nodes.node_ids)
        lines = text.split("\n")
        cfg = self.config.fragments
        for start, end in window_spans(len(lines), cfg.window, cfg.stride):
            entry.windows.append(self._add_location(window_text(lines, start, end), Location(path, start, end)))
        self.files[path] = entry
        return entry

    def _add_location(self, text: str, loc: Location) -> int:
        frag_id = self._by_text.get(text)
        if frag_id is None:
            frag_id = len(self.fragments)
            self.fragments.append(Fragment(frag_id, text, []))
            self._by_text[text] = frag_id
        self.fragments[frag_id].locations.append(loc)
        return frag_id

    def _drop_file(self, path: str) -> set[int]:
        """Remove a file's windows and nodes; returns the fragment ids that lost a location.

        A fragment left without locations keeps its id until `_release` so that a window the update adds back
        (most of an edited file's windows are unchanged) gets its old id: ids do not churn with every keystroke."""
        entry = self.files.pop(path, None)
        if entry is None:
            return set()
        touched = set(entry.windows)
        for frag_id in touched:
            frag = self.fragments[frag_id]
            frag.locations = [loc for loc in frag.locations if loc.path != path]
        self.graph.remove_file(path)
        self.resolver.remove_file(path)
        return touched

    def _release(self, frag_ids: set[int]) -> list[int]:
        """Remove the fragments of `frag_ids` that have no location left; returns their ids."""
        dead = [i for i in sorted(frag_ids) if (f := self.fragments[i]) is not None and not f.locations]
        for frag_id in dead:
            del self._by_text[self.fragments[frag_id].text]
            self.fragments[frag_id] = None
        return dead

    def _resolve(self, path: str) -> np.ndarray:
        edges = self.resolver.resolve(path)
        ids = self.files[path].node_ids
        pairs = np.array([(ids[src], self.files[dst].node_ids[node]) for src, dst, node in edges],
                         dtype=np.int64).reshape(-1, 2)
        self.graph.set_calls(path, pairs)
        return pairs

    # -- fragment x node matrix ----------------------------------------------------------------------------------
    def _file_fragment_nodes(self, entry: FileEntry) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(fragment, node, length) triplets of one file: what each window's lines give each node."""
        rows, cols, vals = [], [], []
        parsed = entry.parsed
        cfg = self.config.fragments
        for frag_id, (start, end) in zip(entry.windows, window_spans(parsed.n_lines, cfg.window, cfg.stride)):
            owners = parsed.line_owner[start:end]
            lens = parsed.line_len[start:end]
            keep = lens > 0
            rows.append(np.full(int(keep.sum()), frag_id))
            cols.append(entry.node_ids[owners[keep]])
            vals.append(lens[keep])
        if not rows:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
        return np.concatenate(rows), np.concatenate(cols), np.concatenate(vals).astype(np.float64)

    def _triplets(self, entries: list[FileEntry]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        parts = [self._file_fragment_nodes(e) for e in entries]
        if not parts:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
        r, c, v = (np.concatenate(x) for x in zip(*parts))
        return r, c, v

    def _rebuild_fragment_nodes(self) -> None:
        r, c, v = self._triplets(list(self.files.values()))
        shape = (len(self.fragments), self.graph.n_ids)
        self._fnodes = sp.csr_matrix((v, (r, c)), shape=shape)  # duplicates summed: a fragment's locations add up
        self._fnodes_t = None

    def _patch_fragment_nodes(self, removed: tuple, added: tuple) -> None:
        """F minus the changed files' old windows plus their new ones (cheaper than a rebuild)."""
        shape = (len(self.fragments), self.graph.n_ids)
        self._fnodes.resize(shape)
        r = np.concatenate((removed[0], added[0]))
        c = np.concatenate((removed[1], added[1]))
        v = np.concatenate((-removed[2], added[2]))
        self._fnodes = (self._fnodes + sp.csr_matrix((v, (r, c)), shape=shape)).tocsr()
        self._fnodes.eliminate_zeros()
        self._fnodes_t = None

    def _fragment_nodes_t(self) -> sp.csr_matrix:
        if self._fnodes_t is None:
            self._fnodes_t = self._fnodes.T.tocsr()
        return self._fnodes_t

    # -- relations -----------------------------------------------------------------------------------------------
    def _window_positions(self, rows: np.ndarray) -> tuple[dict[int, list[tuple[str, int]]], dict[str, list[int]]]:
        stride = self.config.fragments.stride
        positions = {int(r): [(loc.path, loc.start_line // stride) for loc in self.fragments[r].locations]
                     for r in rows if self.fragments[r] is not None}
        paths = {p for locs in positions.values() for p, _ in locs}
        return positions, {p: self.files[p].windows for p in paths}

    def _relation_block(self, rows: np.ndarray) -> sp.csr_matrix:
        rel = self.config.relations
        block = structure_rows(rows, self._fnodes, self._fragment_nodes_t(), self.graph.cost_matrix(), rel.cutoff,
                               rel.max_reach)
        if rel.context_weight > 0:
            positions, file_windows = self._window_positions(rows)
            ctx = context_rows(rows, positions, file_windows, len(self.fragments), rel.context_weight, rel.cutoff)
            block = combine(block, ctx, rel.context_combine)
        return top_k_rows(drop_diagonal(block, rows), rel.top_k).astype(np.float32)

    def _recompute_rows(self, rows: np.ndarray, progress: Progress | None = None) -> None:
        n = len(self.fragments)
        if self.relations.shape != (n, n):
            self.relations.resize((n, n))
        rows = np.asarray(sorted(set(int(r) for r in rows)), dtype=np.int64)
        keep = np.ones(n, dtype=bool)
        keep[rows] = False
        step = 4096
        blocks = []
        for lo in range(0, len(rows), step):
            blocks.append(self._relation_block(rows[lo:lo + step]))
            if progress:
                progress(min(lo + step, len(rows)), len(rows), "relations")
        new = sp.vstack(blocks, format="coo") if blocks else sp.coo_matrix((0, n))
        new_full = sp.csr_matrix((new.data, (rows[new.row], new.col)), shape=(n, n), dtype=np.float32)
        self.relations = (sp.diags(keep.astype(np.float32)) @ self.relations + new_full).tocsr()
        self.relations.eliminate_zeros()

    # -- incremental updates -------------------------------------------------------------------------------------
    def update_file(self, path: str | Path, text: str | None = None) -> None:
        """Re-index one file from `text` (an editor buffer) or from disk; a missing file is removed."""
        self.update_files({self.relpath(path): text})

    def remove_file(self, path: str | Path) -> None:
        self.update_files({self.relpath(path): ""}, removed=True)

    def update_files(self, changes: dict[str, str | None], removed: bool = False,
                     defer_relations: bool = False) -> None:
        """Apply a batch of changes ({relative path: text or None to read disk}) with one relation update.

        `defer_relations`: leave even the changed windows' relation rows to `refresh_relations` (the language
        server's background upkeep does it in slices), so that the update itself holds the index briefly."""
        new_texts: dict[str, tuple[str, str] | None] = {}
        rule = FileRule(self.root, self.config, self.index_dir)  # fresh: a .gitignore may have changed too
        for path, text in changes.items():
            rel = self.relpath(path)
            if removed:
                new_texts[rel] = None
                continue
            # what a build leaves out, an update does too: it is absent (removed if it was indexed)
            source, reason = rule.source(rel, text)
            if source is None and reason not in ("ignored", "unsupported", "unreadable"):  # unreadable: deleted
                log.info("%s not indexed: %s", rel, reason)
            new_texts[rel] = (source.language, source.text) if source is not None else None
        new_texts = {p: v for p, v in new_texts.items()
                     if not (v is None and p not in self.files)
                     and not (v is not None and p in self.files and self.files[p].text == v[1])}
        if not new_texts:
            return

        # seeds in the old graph: the changed files' nodes and the call edges that may change
        old_costs = self.graph.cost_matrix()
        old_keys: set[str] = set()
        seeds: list[np.ndarray] = []
        touched_frags: set[int] = set()
        for path in new_texts:
            if path in self.files:
                old_keys |= self.resolver.files[path].keys()
        dependants = self.resolver.readers_of(old_keys)
        old_calls = {p: self.graph.files[p].call_edges for p in dependants if p in self.graph.files}
        for path in new_texts:
            entry = self.files.get(path)
            if entry is not None:
                seeds.append(entry.node_ids)
                seeds.append(np.array([self.graph.files[path].file_node]))
        old_seed_nodes = np.concatenate(seeds) if seeds else np.zeros(0, np.int64)
        old_reach_nodes = self._reach_nodes(old_costs, old_seed_nodes)

        old_part = self._triplets([self.files[p] for p in new_texts if p in self.files])
        n_before = len(self.fragments)
        for path in new_texts:
            touched_frags |= self._drop_file(path)
        for path, value in new_texts.items():
            if value is not None:
                entry = self._add_file(path, value[0], value[1])
                touched_frags |= set(entry.windows)
        # a window kept (same text) keeps its id and its term row; only new and removed ids change the term index
        dead_frags = self._release(touched_frags)
        retexted = sorted(set(dead_frags) | {i for i in touched_frags if i >= n_before})

        new_keys = set()
        for path, value in new_texts.items():
            if value is not None:
                new_keys |= self.resolver.files[path].keys()
        to_resolve = (dependants | self.resolver.readers_of(new_keys) | {p for p, v in new_texts.items() if v}) \
            & set(self.files)
        new_seed: list[np.ndarray] = []
        changed_endpoints: set[int] = set()
        for path in to_resolve:
            pairs = self._resolve(path)
            if path in old_calls:
                changed = {tuple(e) for e in old_calls[path].tolist()} ^ {tuple(e) for e in pairs.tolist()}
                changed_endpoints |= {n for e in changed for n in e}
        if changed_endpoints:
            endpoints = np.array(sorted(changed_endpoints), dtype=np.int64)
            new_seed.append(endpoints[self.graph.alive[endpoints]])
            # a call edge that went away mattered in the old graph: reach from its ends there
            old_reach_nodes = np.union1d(old_reach_nodes,
                                         self._reach_nodes(old_costs, endpoints[endpoints < old_costs.shape[0]]))
        for path, value in new_texts.items():
            if value is not None:
                new_seed.append(self.files[path].node_ids)
                new_seed.append(np.array([self.graph.files[path].file_node]))
        self._patch_fragment_nodes(old_part, self._triplets([self.files[p] for p, v in new_texts.items() if v]))
        # fragments shared with other files changed their node sets: their nodes are seeds too
        self.term_index.set_rows(retexted, [self.fragments[i].text if self.fragments[i] else None for i in retexted])
        self.relations.resize((len(self.fragments), len(self.fragments)))
        live_touched = np.array([i for i in touched_frags if self.fragments[i] is not None], dtype=np.int64)
        if len(live_touched):
            new_seed.append(np.unique(self._fnodes[live_touched].indices))
        # Rows of the changed windows are exact now; other rows within reach of the change are refreshed
        # later (`refresh_relations`, run by `save` and by the LSP off the request path), because a popular
        # definition can put thousands of rows within reach of one edit.
        self._pending_old = np.union1d(self._pending_old, old_reach_nodes)
        self._pending_seeds = np.union1d(self._pending_seeds, np.concatenate(new_seed) if new_seed else [])
        alive = self.alive_mask()
        touched = np.array(sorted(touched_frags), dtype=np.int64)
        if defer_relations:
            self._pending_rows = np.union1d(self._pending_rows, touched[alive[touched]])
        else:
            self._recompute_rows(touched[alive[touched]])
        dead = touched[~alive[touched]]
        if len(dead):  # a removed fragment keeps no row and appears in no column
            mask = np.ones(len(self.fragments), dtype=np.float32)
            mask[dead] = 0
            d = sp.diags(mask)
            self.relations = (d @ self.relations @ d).tocsr()
            self.relations.eliminate_zeros()
        self.summary.files = len(self.files)
        self.summary.fragments = int(alive.sum())
        if self._needs_compaction(self.summary.fragments):
            self.compact()

    # -- compaction ----------------------------------------------------------------------------------------------
    def _needs_compaction(self, live_fragments: int) -> bool:
        """Dead ids dominate: an edited file's nodes get new ids on every update, and its changed windows new
        fragment ids, so a long editor session would grow every per-id array without bound."""
        dead_nodes = self.graph.n_ids - self.graph.n_alive
        dead_frags = len(self.fragments) - live_fragments
        return dead_nodes > max(self.graph.n_alive, _MIN_DEAD_IDS) or dead_frags > max(live_fragments, _MIN_DEAD_IDS)

    def compact(self) -> None:
        """Renumber live fragments and graph nodes densely (in id order); everything that holds an id follows.

        Nothing outside the index may keep an id across this; `epoch` counts compactions so that a holder can
        tell (the definition finder's buffer state does)."""
        keep = np.flatnonzero(self.alive_mask())
        fmap = np.full(len(self.fragments), -1, dtype=np.int64)
        fmap[keep] = np.arange(len(keep))
        nmap = self.graph.compact()
        live_nodes = np.flatnonzero(nmap >= 0)
        self.fragments = [self.fragments[i] for i in keep.tolist()]
        for new_id, frag in enumerate(self.fragments):
            frag.id = new_id
        self._by_text = {f.text: f.id for f in self.fragments}
        for path, entry in self.files.items():
            entry.windows = fmap[entry.windows].tolist()
            entry.node_ids = self.graph.files[path].node_ids
        self._fnodes = self._fnodes[keep][:, live_nodes].tocsr()
        self._fnodes_t = None
        self.relations = self.relations[keep][:, keep].tocsr()
        self.term_index = self.term_index.take(keep)

        def remap(ids: np.ndarray, table: np.ndarray) -> np.ndarray:
            ids = ids[ids < len(table)].astype(np.int64)
            return np.unique(table[ids][table[ids] >= 0])

        self._pending_rows = remap(self._pending_rows, fmap)
        # a dead node reaches no fragment any more: dropping it from the pending sets changes nothing
        self._pending_old, self._pending_seeds = remap(self._pending_old, nmap), remap(self._pending_seeds, nmap)
        self.epoch += 1

    @property
    def symmetric_relations(self) -> sp.csr_matrix:
        """W for Eq. 9: the stored relations with an entry kept when either of its two fragments keeps it.

        Eq. 8 is symmetric, but each row keeps only its top k, so w_ij and w_ji can differ; Eq. 9 reads a fragment's
        row for its neighbours and a lender's row for what it lends, and both must be the same number. Made once
        per change of the stored matrix (about 5 ms for diffusers), when a request first needs it."""
        w = self.relations
        cached = self._symmetric
        if cached is None or cached[0] is not w or cached[1] != w.nnz or cached[2] != w.shape:
            cached = (w, w.nnz, w.shape, w.maximum(w.T.tocsr()).tocsr())
            self._symmetric = cached
        return cached[3]

    @property
    def relations_stale(self) -> bool:
        return len(self._pending_old) > 0 or len(self._pending_seeds) > 0 or len(self._pending_rows) > 0

    def refresh_relations(self, max_rows: int | None = None) -> int:
        """Recompute relation rows that earlier updates left stale, at most `max_rows` of them (None: all);
        returns how many were redone.

        Once `relations_stale` is False the relation matrix equals a full rebuild's. `max_rows` bounds the work of
        one call, so a caller holding a lock (the language server's background upkeep) can do it in slices."""
        if len(self._pending_old) or len(self._pending_seeds):
            new_reach = self._reach_nodes(self.graph.cost_matrix(), self._pending_seeds.astype(np.int64))
            nodes = np.union1d(self._pending_old, new_reach).astype(np.int64)
            nodes = nodes[nodes < self._fnodes.shape[1]]
            rows = np.unique(self._fragment_nodes_t()[nodes].indices).astype(np.int64)
            self._pending_rows = np.union1d(self._pending_rows, rows)
            self._pending_old = np.zeros(0, np.int64)
            self._pending_seeds = np.zeros(0, np.int64)
        pending = self._pending_rows[self._pending_rows < len(self.fragments)]
        pending = pending[self.alive_mask()[pending]]  # a row that died since needs nothing
        now, self._pending_rows = (pending, pending[:0]) if max_rows is None else (pending[:max_rows],
                                                                                   pending[max_rows:])
        if len(now):
            self._recompute_rows(now)
        return len(now)

    def _reach_nodes(self, costs: sp.csr_matrix, seeds: np.ndarray) -> np.ndarray:
        if len(seeds) == 0:
            return np.zeros(0, np.int64)
        rel = self.config.relations
        return reached_nodes(costs, np.unique(seeds), rel.cutoff, rel.max_reach)

    # -- queries -------------------------------------------------------------------------------------------------
    def alive_mask(self) -> np.ndarray:
        """Per fragment id: still present (False for ids whose windows all went away)."""
        return np.fromiter((f is not None for f in self.fragments), dtype=bool, count=len(self.fragments))

    def file_lines(self, path: str) -> list[str] | None:
        entry = self.files.get(path)
        return entry.lines if entry is not None else None

    def region_strength(self, path: str, start_line: int, end_line: int) -> np.ndarray:
        """Per fragment: the strongest max-product path from a node on lines [start, end) of `path` to one of its
        nodes (0 where none is within the cutoff).

        The query side's relation (beyond the paper). Not Eq. 8's length-weighted average: one call from the
        code being written to a definition is the signal, and averaging it over every node pair of two windows
        drowns it (measured: the average raised definitions far less than the strongest link; see README).
        """
        out = np.zeros(len(self.fragments), dtype=np.float32)
        entry = self.files.get(path)
        if entry is None or start_line >= end_line:
            return out
        parsed = entry.parsed
        start, end = max(0, start_line), min(end_line, parsed.n_lines)
        keep = parsed.line_len[start:end] > 0
        if not keep.any():
            return out
        sources = np.unique(entry.node_ids[parsed.line_owner[start:end][keep]])
        rel = self.config.relations
        strengths = max_product_strengths(self.graph.cost_matrix(), sources, rel.cutoff, rel.max_reach)
        best = strengths.max(axis=0).tocoo()  # per node: its strongest link to the region
        if best.nnz == 0:
            return out
        touched = (self._fragment_nodes_t()[best.col] > 0).astype(np.float32)  # reached nodes x fragments
        q = (sp.diags(best.data.astype(np.float32)) @ touched).max(axis=0).toarray().ravel()
        out[: len(q)] = q
        return out

    def relation_edge_types(self, i: int, j: int) -> list[str]:
        """Edge types along the strongest node path joining fragments i and j (for explanations)."""
        a, b = self._fnodes[i], self._fnodes[j]
        if a.nnz == 0 or b.nnz == 0:
            return []
        costs = self.graph.cost_matrix()
        dist, pred = dijkstra(costs, indices=a.indices, return_predecessors=True,
                              limit=-np.log(self.config.relations.cutoff))
        score = (a.data[:, None] * b.data[None, :]) * np.exp(-dist[:, b.indices])
        if not np.isfinite(dist[:, b.indices]).any() or score.max() <= 0:
            return []
        si, ti = np.unravel_index(np.argmax(score), score.shape)
        path = [int(b.indices[ti])]
        while path[-1] != a.indices[si]:
            path.append(int(pred[si, path[-1]]))
        types = [self.graph.edge_type(u, v) for u, v in zip(path, path[1:])]
        return [t for t in types if t is not None] or ["same node"]

    # -- summary and persistence ---------------------------------------------------------------------------------
    def _summarize(self, walked: WalkResult, phases: dict[str, float]) -> None:
        s = self.summary
        s.files = len(self.files)
        s.fragments = int(self.alive_mask().sum())
        s.nodes = int(self.graph.alive.sum())
        s.edges = self.graph.edge_counts()
        s.relation_nonzeros = int(self.relations.nnz)
        s.phases_s = {k: round(v, 4) for k, v in phases.items()}
        s.skipped = dict(walked.skipped)
        s.notes = walked.notes[:50]
        s.parse_errors = sum(1 for e in self.files.values() if e.parsed.has_errors)

    def save(self) -> Path:
        """Write the index file; a repository that cannot be written gets it in the user's cache (said once)."""
        self.refresh_relations()
        t = time.perf_counter()
        meta, arrays = index_codec.encode(self)
        folder = self.index_dir
        if self._store_dir is None and not Path(self.config.index.dir).is_absolute() \
                and not folder.resolve().is_relative_to(self.root):  # a symlink in the repository leads out
            target = self._write_fallback(meta, arrays, "it leads outside the repository")
        else:
            try:
                target = write_state(folder, meta, arrays)
            except OSError as exc:
                if not isinstance(exc, PermissionError) and exc.errno != errno.EROFS:
                    raise RepocompError(f"cannot write the index to {folder}: {exc.strerror or exc}") from None
                target = self._write_fallback(meta, arrays, exc.strerror or str(exc))
        self.summary.phases_s["write"] = round(time.perf_counter() - t, 4)
        self.summary.index_bytes = target.stat().st_size
        return target

    def _write_fallback(self, meta: dict[str, Any], arrays: dict[str, np.ndarray], why: str) -> Path:
        folder = fallback_dir(self.root)
        if folder == self.index_dir:
            raise RepocompError(f"cannot write the index to {folder}: {why}")
        log.warning("cannot write the index to %s (%s); keeping it in %s instead", self.index_dir, why, folder)
        try:
            target = write_state(folder, meta, arrays)
        except OSError as exc:
            raise RepocompError(f"cannot write the index to {self.index_dir} ({why}) nor to {folder} "
                                f"({exc.strerror or exc})") from None
        self._store_dir = folder
        return target

    @classmethod
    def load(cls, root: str | Path, config: Config | None = None) -> "Index":
        """The stored index: `[index] dir`, else the user's cache (where a read-only repository's index goes).

        Raises one of the `IndexUnusableError` kinds (`IndexMissingError`, `IndexStaleError`, `IndexCorruptError`)
        when no stored index can be used; no raw error of the store, codec or numpy/scipy comes out.
        """
        root = Path(root)
        config = config or load_config(root)
        index = cls(root, config)
        try:
            index._restore(*read_state(index.index_dir))
            return index
        except IndexUnusableError as exc:
            cached = cls(root, config)
            cached._store_dir = fallback_dir(cached.root)
            if cached._store_dir == index.index_dir or not (cached._store_dir / INDEX_FILE).is_file():
                raise
            try:
                cached._restore(*read_state(cached.index_dir))
            except IndexUnusableError as cached_exc:  # the more telling one: the cache's when the folder has none
                raise (cached_exc if isinstance(exc, IndexMissingError) else exc) from None
            return cached

    def _restore(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        """Fill this empty index from a stored state; the codec's, term index's and numpy/scipy's errors are
        translated here, where they enter: another version -> `IndexStaleError`, anything else -> corrupt."""
        stored = meta.get("config")
        live = index_codec.plain(self.config.to_dict())
        for section in _STRUCTURAL_SECTIONS:
            if not isinstance(stored, dict) or stored.get(section) != live[section]:
                raise IndexStaleError(f"the index at {self.index_dir} was built with other [{section}] "
                                      "settings; rebuilding")
        try:
            index_codec.decode(self, meta, arrays)
            self._rebuild_fragment_nodes()  # from the decoded tables: a damage the codec missed fails here
        except index_codec.OtherVersionError as exc:
            raise IndexStaleError(f"{self.index_dir / INDEX_FILE} was written by another repocomp ({exc}); "
                                  "rebuilding") from None
        except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError, MemoryError,
                RecursionError) as exc:
            raise IndexCorruptError(f"{self.index_dir / INDEX_FILE} is corrupt ({type(exc).__name__}: {exc}); "
                                    "rebuilding") from None

    @classmethod
    def open(cls, root: str | Path, config: Config | None = None, build: bool = True,
             progress: Progress | None = None) -> "Index":
        """Load the stored index; build (and save) it when missing, corrupt, old or built with other settings.

        A missing or stale index (another version, other settings) is rebuilt quietly (an info log), a corrupt one
        with a warning; with `build=False` the `IndexUnusableError` is raised instead. When the index cannot be
        saved anywhere the built one is used from memory (and that is said)."""
        try:
            return cls.load(root, config)
        except IndexUnusableError as exc:
            if not build:
                raise
            if isinstance(exc, IndexCorruptError):
                log.warning("%s", exc)
            else:
                log.info("%s", exc)
        index = cls.build(root, config, progress)
        try:
            index.save()
        except RepocompError as exc:
            log.warning("%s; working from an index in memory", exc)
        return index

    # -- export --------------------------------------------------------------------------------------------------
    def to_networkx(self):
        return self.graph.to_networkx()


__all__ = ["Index", "IndexSummary", "FileEntry", "EDGE_TYPES"]
