"""The repository's code graph (FragRel Appendix A): typed, weighted, undirected edges between

- syntax nodes (statements and definitions, see `graph.languages`): `syntax` edges child -> enclosing node,
- file and directory nodes: `directory` edges file -> folder -> parent folder,
- each file's syntax root and its file node: `file` edges,
- call sites and the definitions they invoke: `call` edges (resolved by `graph.resolve`).

Node ids are stable integers between compactions; a file that changes gets new ids and its old ones become dead
(ids are not reused, so nothing that still refers to an old id can silently point at another node). `compact`
renumbers the live nodes when the owner (the index) decides dead ids dominate, and returns the mapping.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from graph.coded_strings import CodedStrings, room_for
from graph.csr_rows import PatchedRows, patched
from graph.parsing import ParsedFile

EDGE_TYPES = ("syntax", "directory", "file", "call")
_TYPE_CODE = {name: i for i, name in enumerate(EDGE_TYPES)}


@dataclass(slots=True)  # one per file
class FileNodes:
    path: str
    file_node: int
    node_ids: np.ndarray  # global id of each local syntax node (0 = syntax root)
    syntax_edges: np.ndarray  # (k, 2) global (child, parent)
    call_edges: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), dtype=np.int64))  # (k, 2) global


class CodeGraph:
    def __init__(self, weights: dict[str, float]):
        self.weights = {name: float(weights[name]) for name in EDGE_TYPES}
        self.files: dict[str, FileNodes] = {}
        self.dirs: dict[str, int] = {}  # folder path ("" = repository root) -> node id
        self._dir_files: dict[str, int] = {}  # folder -> number of files and folders directly under it
        self.kind = CodedStrings()  # per node: syntax kind, "file" or "directory"
        self.owner = CodedStrings()  # per node: file or folder path
        # per node: alive, and the text length it owns; kept in arrays grown geometrically (see `_new_nodes`)
        self._alive = np.zeros(0, dtype=bool)
        self._length = np.zeros(0, dtype=np.float64)
        self._csr: PatchedRows | None = None
        # nodes with an edge added or removed since `_csr` was made (both ends of an added edge): `cost_matrix`
        # patches their rows and their old neighbours' instead of rebuilding
        self._touched: set[int] = set()
        # readers (the server's requests, its update worker settling) patch one at a time: a request that needs the
        # matrix while another thread patches it waits for that patch instead of computing the same beside it
        self._patching = threading.Lock()
        self.folds_deferred = False  # the patched rows stay beside the cost matrix (a build's batches: see csr_rows)

    # -- ids -----------------------------------------------------------------------------------------------------
    @property
    def n_ids(self) -> int:
        return len(self.kind)

    @property
    def alive(self) -> np.ndarray:
        return self._alive[:self.n_ids]

    @alive.setter
    def alive(self, alive: np.ndarray) -> None:
        self._alive = alive

    @property
    def length(self) -> np.ndarray:
        return self._length[:self.n_ids]

    @length.setter
    def length(self, length: np.ndarray) -> None:
        self._length = length

    def _new_nodes(self, kinds: Sequence[str], owner: str, lengths: np.ndarray | None = None) -> np.ndarray:
        """Ids for new nodes. The per-node arrays grow geometrically (`room_for`): appending a file's nodes to arrays of the
        whole graph copied them all (a 64 MB batch into a 3-million-node graph spent 26 s copying)."""
        start, end = self.n_ids, self.n_ids + len(kinds)
        self.kind.extend(kinds)
        self.owner.repeat(owner, len(kinds))
        self._alive, self._length = room_for(self._alive, end), room_for(self._length, end)
        self._alive[start:end] = True
        self._length[start:end] = 0.0 if lengths is None else lengths
        ids = np.arange(start, end, dtype=np.int64)
        self._touch(ids)
        return ids

    def _kill(self, ids: np.ndarray) -> None:
        self.alive[ids] = False
        self.length[ids] = 0.0
        self._touch(ids)

    def _touch(self, ids: np.ndarray | list[int]) -> None:
        if self._csr is not None:
            self._touched.update(np.asarray(ids, np.int64).ravel().tolist())

    @property
    def n_alive(self) -> int:
        return int(np.count_nonzero(self.alive))  # a fifth of sum()'s time over a monorepo's 3 million nodes

    def compact(self) -> np.ndarray:
        """Renumber the live nodes 0..n_alive-1 in id order; returns old id -> new id (-1 for a dead node)."""
        keep = np.flatnonzero(self.alive)
        remap = np.full(self.n_ids, -1, dtype=np.int64)
        remap[keep] = np.arange(len(keep))
        self.alive, self.length = self.alive[keep], self.length[keep]  # before `kind`, which gives their size
        self.kind, self.owner = self.kind.take(keep), self.owner.take(keep)
        self.dirs = {folder: int(remap[node]) for folder, node in self.dirs.items()}
        for entry in self.files.values():
            entry.file_node = int(remap[entry.file_node])
            entry.node_ids = remap[entry.node_ids]
            entry.syntax_edges = remap[entry.syntax_edges]
            entry.call_edges = remap[entry.call_edges]
        self._csr = None
        return remap

    # -- directory tree ------------------------------------------------------------------------------------------
    def _dir_node(self, folder: str) -> int:
        """The folder's node, made with those of its parents that are missing (a loop: folders may nest
        thousands deep)."""
        missing: list[str] = []
        at = folder
        while at not in self.dirs:
            missing.append(at)
            if not at:
                break
            at = self._folder(at)
        for name in missing:  # the innermost first (the order ids were always given in)
            self.dirs[name] = int(self._new_nodes(["directory"], name)[0])
            self._dir_files[name] = 0
        for name in missing:
            if name:
                self._dir_files[self._folder(name)] += 1
                self._touch([self.dirs[self._folder(name)]])  # gains an edge to the new folder
        return self.dirs[folder]

    def _release_dir(self, folder: str) -> None:
        """One file or folder fewer under `folder`; an empty folder goes, and so on upwards."""
        while True:
            self._dir_files[folder] -= 1
            if self._dir_files[folder] > 0 or not folder:
                return
            self._kill(np.array([self.dirs.pop(folder)]))
            del self._dir_files[folder]
            folder = self._folder(folder)

    @staticmethod
    def _folder(path: str) -> str:
        """"a/b/c.py" -> "a/b", "c.py" -> "" (string work: this runs for every file on every graph change)."""
        return path.rpartition("/")[0]

    # -- files ---------------------------------------------------------------------------------------------------
    def set_file(self, path: str, parsed: ParsedFile) -> FileNodes:
        """Add or replace one file's nodes and syntax edges (its call edges are set by `set_calls`)."""
        old = self.files.get(path)
        if old is not None:
            self._kill(np.concatenate((old.node_ids, [old.file_node])))
        else:
            folder = self._folder(path)
            self._dir_node(folder)
            self._dir_files[folder] += 1
        file_node = int(self._new_nodes(["file"], path)[0])
        ids = self._new_nodes(parsed.kinds, path, parsed.node_lengths())
        child = np.arange(1, parsed.n_nodes)
        syntax = np.stack((ids[child], ids[parsed.parent[child]]), axis=1) if len(child) else np.zeros((0, 2), np.int64)
        entry = FileNodes(path, file_node, ids, syntax.astype(np.int64))
        self.files[path] = entry
        self._touch([self.dirs[self._folder(path)]])  # its edge to the new file node
        return entry

    def remove_file(self, path: str) -> FileNodes | None:
        old = self.files.pop(path, None)
        if old is not None:
            self._kill(np.concatenate((old.node_ids, [old.file_node])))
            self._release_dir(self._folder(path))
        return old

    def set_calls(self, path: str, edges: np.ndarray) -> None:
        entry = self.files[path]
        self._touch(entry.call_edges)
        entry.call_edges = edges.reshape(-1, 2).astype(np.int64)
        self._touch(entry.call_edges)

    # -- edges ---------------------------------------------------------------------------------------------------
    def edges(self, paths: list[str] | None = None, folders: list[str] | None = None
              ) -> tuple[np.ndarray, np.ndarray]:
        """All edges as ((k, 2) node pairs, (k,) type codes); or those of these files (syntax, file, their folder
        edge, their calls) and these folders (their edge to the parent folder)."""
        entries = list(self.files.values()) if paths is None else [self.files[p] for p in paths]
        file_pairs = [(e.node_ids[0], e.file_node) for e in entries]
        dir_pairs = [(e.file_node, self.dirs[self._folder(e.path)]) for e in entries]
        dir_pairs += [(self.dirs[folder], self.dirs[self._folder(folder)])
                      for folder in (self.dirs if folders is None else folders) if folder]
        groups = {
            "syntax": [e.syntax_edges for e in entries],
            "file": [np.array(file_pairs, dtype=np.int64).reshape(-1, 2)],
            "directory": [np.array(dir_pairs, dtype=np.int64).reshape(-1, 2)],
            "call": [e.call_edges for e in entries],
        }
        parts, types = [], []
        for name, arrays in groups.items():
            for arr in arrays:
                parts.append(arr)
                types.append(np.full(len(arr), _TYPE_CODE[name], dtype=np.int8))
        return np.concatenate(parts).astype(np.int64), np.concatenate(types)

    def edge_counts(self) -> dict[str, int]:
        _, types = self.edges()
        counts = np.bincount(types, minlength=len(EDGE_TYPES)) if len(types) else np.zeros(len(EDGE_TYPES), int)
        return {name: int(counts[i]) for i, name in enumerate(EDGE_TYPES)}

    def keep_cost_matrix(self, costs: sp.csr_matrix) -> None:
        """Take `costs` (stored with the index: read in place) as the cost matrix of the graph as it is."""
        self._csr = patched(costs)
        self._touched.clear()

    def cost_matrix(self) -> PatchedRows:
        """Symmetric CSR of edge costs -log(w); parallel edges keep the strongest.

        After a change only the rows of the touched nodes and of their old neighbours are made again, from the
        edges of the files and folders they belong to: the same matrix as a rebuild, in time that follows the
        change (a rebuild sorts every edge of the repository), kept beside the matrix rather than copied into it
        (see `PatchedRows`)."""
        if self._csr is None:
            u, v, c = self._costs(*self.edges())
            n = self.n_ids
            indptr = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(np.bincount(u, minlength=n), out=indptr[1:])
            # explicit zeros are weight-1 edges: build the CSR by hand so they are kept
            csr = sp.csr_matrix((c, v, indptr), shape=(n, n))
            csr.has_sorted_indices = True  # `_costs` sorts by (u, v)
            self._csr = PatchedRows(csr)
            self._touched.clear()
        elif self._touched or self._csr.shape[0] != self.n_ids:
            with self._patching:
                if self._touched or self._csr.shape[0] != self.n_ids:  # not patched meanwhile
                    self._csr = self._patched(self._csr)
                    self._touched.clear()
        return self._csr

    def _costs(self, pairs: np.ndarray, types: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Edges both ways, without self-loops, the cheapest of parallel ones: (u, v, cost) sorted by (u, v)."""
        cost = -np.log(np.array([self.weights[t] for t in EDGE_TYPES]))[types]
        u = np.concatenate((pairs[:, 0], pairs[:, 1]))
        v = np.concatenate((pairs[:, 1], pairs[:, 0]))
        c = np.concatenate((cost, cost))
        keep = u != v
        u, v, c = u[keep], v[keep], c[keep]
        order = np.lexsort((c, v, u))  # per (u, v) the cheapest first
        u, v, c = u[order], v[order], c[order]
        first = np.ones(len(u), dtype=bool)
        first[1:] = (u[1:] != u[:-1]) | (v[1:] != v[:-1])
        return u[first], v[first], c[first]

    def _patched(self, old: PatchedRows) -> PatchedRows:
        """`old` with the rows the touched nodes changed made again (see `cost_matrix`)."""
        n = self.n_ids
        touched = np.array(sorted(self._touched), np.int64)
        is_touched = np.zeros(n, bool)
        is_touched[touched] = True
        before = touched[touched < old.shape[0]]
        neighbours = np.unique(old.rows(before).indices).astype(np.int64)
        # every current edge at a touched node is an edge of a touched node's file, a call from the file of an old
        # neighbour (a caller that is new is touched itself), or joins a touched folder to its files and folders
        near = np.union1d(touched, neighbours)
        # (per node lookups vectorized: a folder's node has a neighbour for each of its files and folders)
        owners = self.owner.values_at(touched) & self.files.keys()
        callers = self.owner.values_at(neighbours[~self.kind.is_in(neighbours, ("file", "directory"))])
        touched_folders = {f for f, node in self.dirs.items() if node in self._touched}
        folders = sorted(f for f in self.dirs if f in touched_folders or (f and self._folder(f) in touched_folders)) \
            if touched_folders else []
        pairs, types = self.edges(sorted(owners), folders)
        calls = [self.files[p].call_edges for p in sorted(callers - owners) if p in self.files]
        # a touched folder's files: its old neighbours and the new file nodes (the files are not scanned)
        file_nodes = near[self.kind.is_in(near, ("file",))] if touched_folders else near[:0]
        members = [(node, self.dirs[folder]) for node in file_nodes.tolist()
                   if (folder := self._folder(self.owner[node])) in touched_folders
                   and self.owner[node] in self.files and self.files[self.owner[node]].file_node == node]
        extra = calls + [np.array(members, np.int64).reshape(-1, 2)]
        extra_types = [np.full(len(a), _TYPE_CODE["call"], np.int8) for a in calls] + \
            [np.full(len(members), _TYPE_CODE["directory"], np.int8)]
        pairs, types = np.concatenate([pairs, *extra]), np.concatenate([types, *extra_types])
        at_touched = is_touched[pairs[:, 0]] | is_touched[pairs[:, 1]]  # the edges at a touched node, before sorting
        u, v, c = self._costs(pairs[at_touched], types[at_touched])
        # the untouched neighbours keep their other entries
        kept = neighbours[~is_touched[neighbours]]
        rest = old.rows(kept).tocoo()
        off = ~is_touched[rest.col]
        rows = np.concatenate((u, kept[rest.row[off]]))
        cols = np.concatenate((v, rest.col[off].astype(np.int64)))
        costs = np.concatenate((c, rest.data[off]))
        redone = np.union1d(touched, kept)
        order = np.lexsort((cols, rows))
        rows, cols, costs = rows[order], cols[order], costs[order]
        indptr = np.zeros(len(redone) + 1, np.int64)
        np.cumsum(np.bincount(np.searchsorted(redone, rows), minlength=len(redone)), out=indptr[1:])
        block = sp.csr_matrix((costs, cols, indptr), shape=(len(redone), n))
        block.has_sorted_indices = True  # sorted by (row, column) above
        return old.replace(redone, block, (n, n), merge=not self.folds_deferred)

    def edge_type(self, a: int, b: int) -> str | None:
        """The strongest edge type joining two nodes (for explanations)."""
        pairs, types = self.edges()
        hit = ((pairs[:, 0] == a) & (pairs[:, 1] == b)) | ((pairs[:, 0] == b) & (pairs[:, 1] == a))
        if not hit.any():
            return None
        return max((EDGE_TYPES[t] for t in types[hit]), key=lambda name: self.weights[name])

    def to_networkx(self):
        """The live graph as a `networkx.Graph` (node attributes kind/owner, edge attributes type/weight)."""
        import networkx as nx

        g = nx.Graph()
        for node in np.flatnonzero(self.alive):
            g.add_node(int(node), kind=self.kind[node], owner=self.owner[node])
        pairs, types = self.edges()
        for (a, b), t in zip(pairs.tolist(), types.tolist()):
            name = EDGE_TYPES[t]
            if a == b:
                continue
            if g.has_edge(a, b) and g[a][b]["weight"] >= self.weights[name]:
                continue
            g.add_edge(a, b, type=name, weight=self.weights[name])
        return g
