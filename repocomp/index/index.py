"""The repository index: files, fragments, code graph, fragment relation matrix W and term index.

`Index.build` makes it from scratch, `Index.open` loads it (rebuilding a corrupt, old or differently configured
one): building.py does both, persistence.py the stored file. `update_file`/`remove_file`/`update_files` patch it
incrementally: only the relation rows whose node
neighbourhood (within the cutoff) touches a changed node are recomputed, which gives the same matrix as a
full rebuild.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from graph.code_graph import EDGE_TYPES, CodeGraph
from graph.lookup import SymbolLookup
from graph.parse_pool import parsed_files
from graph.parsing import ParsedFile
from graph.resolve import Resolver, make_symbols
from repocomp.config.schema import Config
from repocomp.errors import RepocompError
from repocomp.index.fragment_store import FragmentStore
from repocomp.index.fragments import Location, line_starts, window_spans
from repocomp.index.records import FileEntry, IndexSummary
from repocomp.index.relation_upkeep import Progress, RelationUpkeep
from repocomp.index.revisions import Revisions
from repocomp.index.store import page_out, read_ahead
from repocomp.index.term_index import TermIndex
from repocomp.index.walk import FileRule, addressable

log = logging.getLogger(__name__)

# compact only past this many dead ids: a small repository's few edits are not worth renumbering for
_MIN_DEAD_IDS = 4096

Checkpoint = Callable[["Index"], object]  # sees the index between two batches of a build (what it returns: unused)
Writing = Callable[[], AbstractContextManager[Any]]  # held while a batch changes the index (the server's write lock)


@dataclass(frozen=True)
class PreparedUpdate:
    """An update's reading done (`Index.prepare_update`), for `Index.apply_update`."""

    new_texts: dict[str, tuple[str, str] | None]  # path -> (language, text), or None to remove
    old_costs: Any  # the graph's cost matrix before the change (PatchedRows)
    old_reach: np.ndarray  # the nodes the changed files' nodes reach in it
    dependants: set[str]  # files whose calls resolve into the changed ones
    old_calls: dict[str, np.ndarray]  # their call edges before
    old_part: Any  # the changed files' (fragment, node, weight) triplets before (RelationUpkeep.file_triplets)
    parsed: list[tuple[tuple[str, tuple[str, str]], ParsedFile]]  # ((path, (language, text)), parse) of new texts


class Index:
    """A repository's index: its files with their syntax and windows, the fragment store, the code graph with
    cross-file call resolution, the term index and the fragment relations (`RelationUpkeep`).

    This class holds them and updates them together; each part keeps its own job. Built by building.py, stored by
    persistence.py as an explicit schema of arrays (`index_codec`), never as pickled objects."""

    def __init__(self, root: Path, config: Config):
        self.root = Path(root).resolve()
        self.config = config
        self.files: dict[str, FileEntry] = {}
        self.fragments = FragmentStore()
        self.graph = CodeGraph(config.graph.__dict__)
        self.resolver = Resolver()
        self.term_index = TermIndex.build([])
        self.upkeep = RelationUpkeep(self)
        self.summary = IndexSummary()
        self.epoch = 0  # compactions so far (ids before one mean nothing after it)
        self.revisions = Revisions()  # the updates so far and which files they changed
        self._text_chars: int | None = None  # the files' text in characters (as the walk counts it), once counted
        self.store_dir: Path | None = None  # set when the index lives in the user's cache instead
        self.mapped: mmap.mmap | None = None  # the map of the index file a loaded index reads in place
        # what the user is told about how this index came to be (a stored one set aside, the cache used instead):
        # logged as warnings where they happen; the language server shows them too
        self.notices: list[str] = []
        self._lookup: SymbolLookup | None = None

    @property
    def lookup(self) -> SymbolLookup:
        """Names resolved against this index's symbols, one for every reader of it (the definitions of each
        completer over it): its method-name table takes a pass over every file to make, 0.9-1.9 s on a
        7.6-million-line monorepo, which a completer made anew (a setting changed) paid in its first request."""
        if self._lookup is None or self._lookup.resolver is not self.resolver:
            self._lookup = SymbolLookup(self.resolver, self.file_lines)
        return self._lookup

    # -- paths ---------------------------------------------------------------------------------------------------
    @property
    def index_dir(self) -> Path:
        """Where the index is stored: `[index] dir`, or the user's cache when that could not be written."""
        if self.store_dir is not None:
            return self.store_dir
        folder = Path(self.config.index.dir)
        return folder if folder.is_absolute() else self.root / folder

    # -- building and the stored file (building.py, persistence.py) -----------------------------------------------
    @classmethod
    def build(cls, root: str | Path, config: Config | None = None, progress: Progress | None = None,
              checkpoint: Checkpoint | None = None, writing: Writing = contextlib.nullcontext) -> Index:
        """Index the repository's files (`building.build_index`)."""
        from repocomp.index.building import build_index

        return build_index(cls, root, config, progress, checkpoint, writing)

    @classmethod
    def open(cls, root: str | Path, config: Config | None = None, build: bool = True,
             progress: Progress | None = None, checkpoint: Checkpoint | None = None,
             writing: Writing = contextlib.nullcontext) -> Index:
        """The stored index, or one built (and saved) where it is missing or unusable (`building.open_index`)."""
        from repocomp.index.building import open_index

        return open_index(cls, root, config, build, progress, checkpoint, writing)

    @classmethod
    def load(cls, root: str | Path, config: Config | None = None) -> Index:
        """The stored index, or an `IndexUnusableError` kind (`persistence.load_index`)."""
        from repocomp.index.persistence import load_index

        return load_index(cls, root, config)

    def save(self, while_written: Callable[[], AbstractContextManager[None]] | None = None,
             retired: list[object] | None = None) -> Path:
        """Write the index file and read it back in place (`persistence.save_index`); `while_written`: a context
        the file's writing runs in (the language server lets requests read the index meanwhile); `retired`: where
        the file read before goes, for the caller to let go once its lock is (unmapping it takes a while)."""
        from repocomp.index.persistence import save_index

        return save_index(self, while_written, retired)

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
    def add_file(self, path: str, language: str, text: str, parsed: ParsedFile) -> FileEntry:
        nodes = self.graph.set_file(path, parsed)
        self.resolver.set_file(make_symbols(path, parsed))
        starts = line_starts(text)
        cfg = self.config.fragments
        windows = [self.fragments.add_slice(text, starts[start], starts[end] - 1, Location(path, start, end))
                   for start, end in window_spans(len(starts) - 1, cfg.window, cfg.stride)]
        entry = FileEntry(path, language, text, parsed, np.array(windows, np.int64), nodes.node_ids)
        self.files[path] = entry
        if self._text_chars is not None:
            self._text_chars += len(text)
        return entry

    def _drop_file(self, path: str) -> set[int]:
        """Remove a file's windows and nodes; returns the fragment ids that lost a location (released later, so
        that a window the update adds back keeps its id)."""
        entry = self.files.pop(path, None)
        if entry is None:
            return set()
        touched = set(entry.windows.tolist())
        if self._text_chars is not None:
            self._text_chars -= len(entry.text)
        self.fragments.forget_path(touched, path, entry.source)
        self.graph.remove_file(path)
        self.resolver.remove_file(path)
        return touched

    def resolve_calls(self, path: str) -> np.ndarray:
        edges = self.resolver.resolve(path)
        ids = self.files[path].node_ids
        pairs = np.array([(ids[src], self.files[dst].node_ids[node]) for src, dst, node in edges],
                         dtype=np.int64).reshape(-1, 2)
        self.graph.set_calls(path, pairs)
        return pairs

    def _file_nodes(self, paths: list[str]) -> np.ndarray:
        """The graph nodes of these indexed files: their syntax nodes and file nodes."""
        parts = [np.append(self.files[p].node_ids, self.graph.files[p].file_node) for p in paths]
        return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)

    # -- incremental updates -------------------------------------------------------------------------------------
    def update_file(self, path: str | Path, text: str | None = None) -> None:
        """Re-index one file from `text` (an editor buffer) or from disk; a missing file is removed."""
        self.update_files({self.relpath(path): text})

    def remove_file(self, path: str | Path) -> None:
        self.update_files({self.relpath(path): ""}, removed=True)

    def _read_changes(self, changes: dict[str, str | None], removed: bool) -> dict[str, tuple[str, str] | None]:
        """{path: (language, text) to index, or None to remove}, for the changes that change something."""
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
        changed = {p: v for p, v in new_texts.items()
                   if not (v is None and p not in self.files)
                   and not (v is not None and p in self.files and self.files[p].text == v[1])}
        return self._within_limits(changed)

    def _within_limits(self, changed: dict[str, tuple[str, str] | None]) -> dict[str, tuple[str, str] | None]:
        """`changed` less the new files that would take the folder past [index] max_files or its text budget
        (max_total_bytes, max_memory_mb; counted as the walk counts them): an update never grows the index past
        what a build would hold."""
        new = sorted(p for p, v in changed.items() if v is not None and p not in self.files)
        if not new:
            return changed
        cfg = self.config.index
        files = len(self.files) - sum(1 for p, v in changed.items() if v is None and p in self.files)
        size = self._text_size() + sum(
            len(v[1]) - len(self.files[p].text) if v is not None else -len(self.files[p].text)
            for p, v in changed.items() if p in self.files)
        max_bytes, bytes_setting = cfg.text_budget()
        for path in new:
            text = changed[path][1]  # type: ignore[index]
            if files + 1 > cfg.max_files or size + len(text) > max_bytes:
                log.warning("%s not indexed: the folder is at its limits ([index] max_files %d, %s)",
                            path if addressable(path) else repr(path), cfg.max_files, bytes_setting)
                del changed[path]
                continue
            files, size = files + 1, size + len(text)
        return changed

    def _text_size(self, give_back: bool = True) -> int:
        """The files' text in characters: counted once (reading every text: a loaded index's file pages are given
        back after, unless the caller gives them back itself), then kept as files come and go (counting at every
        new file read 276 MB in a monorepo)."""
        if self._text_chars is None:
            self._text_chars = sum(len(e.source) if isinstance(e.source, str) else _chars(e.source)
                                   for e in self.files.values())
            if give_back:
                page_out(self.mapped)
        return self._text_chars

    def update_files(self, changes: dict[str, str | None], removed: bool = False,
                     defer_relations: bool = False) -> bool:
        """Apply a batch of changes ({relative path: text or None to read disk}) with one relation update; whether
        any changed the index (a text it already holds does not).

        `defer_relations`: leave even the changed windows' relation rows to `refresh_relations` (the language
        server's background upkeep does it in slices), so that the update itself holds the index briefly."""
        prepared = self.prepare_update(changes, removed)
        return prepared is not None and self.apply_update(prepared, defer_relations)

    def prepare_update(self, changes: dict[str, str | None], removed: bool = False) -> PreparedUpdate | None:
        """What an update reads and changes nothing of: the new texts and their parses, and in the graph as it is
        what the changed files reach and the calls of the files that read them (None: nothing changes). The
        language server prepares while requests read on, then applies with the index to itself; nothing may
        change the index in between."""
        new_texts = self._read_changes(changes, removed)
        if not new_texts:
            return None
        old_paths = [p for p in new_texts if p in self.files]
        old_costs = self.graph.cost_matrix()
        dependants = self.resolver.readers_of(set().union(*(self.resolver.files[p].keys() for p in old_paths)))
        added = [(path, kept) for path in new_texts if (kept := new_texts[path]) is not None]  # (language, text)
        return PreparedUpdate(
            new_texts, old_costs, self.upkeep.reach(old_costs, self._file_nodes(old_paths)), dependants,
            {p: self.graph.files[p].call_edges for p in dependants if p in self.graph.files},
            self.upkeep.file_triplets([self.files[p] for p in old_paths]),
            list(zip(added, parsed_files([(text, language) for _, (language, text) in added],
                                         self.config.index.build_cores()))))

    def apply_update(self, prepared: PreparedUpdate, defer_relations: bool = False) -> bool:
        """Apply what `prepare_update` read (see `update_files`)."""
        new_texts, old_costs, old_reach = prepared.new_texts, prepared.old_costs, prepared.old_reach
        dependants, old_calls, old_part = prepared.dependants, prepared.old_calls, prepared.old_part
        new_paths = [p for p, v in new_texts.items() if v is not None]
        self.revisions.note(new_texts)

        n_before = len(self.fragments)
        touched_frags: set[int] = set()
        for path in new_texts:
            touched_frags |= self._drop_file(path)
        for (path, (language, text)), parse in prepared.parsed:
            touched_frags |= set(self.add_file(path, language, text, parse).windows.tolist())
        # a window kept (same text) keeps its id and its term row; only new and removed ids change the term index
        dead_frags = self.fragments.release(touched_frags)
        retexted = sorted(set(dead_frags) | {i for i in touched_frags if i >= n_before})
        self.term_index.set_rows(retexted, (f.text if (f := self.fragments[i]) else None for i in retexted))

        # resolve again the files whose calls may have changed; a changed call edge is a seed in both graphs
        new_keys = set().union(*(self.resolver.files[p].keys() for p in new_paths))
        changed_endpoints: set[int] = set()
        for path in (dependants | self.resolver.readers_of(new_keys) | set(new_paths)) & set(self.files):
            pairs = self.resolve_calls(path)
            if path in old_calls:
                changed = {tuple(e) for e in old_calls[path].tolist()} ^ {tuple(e) for e in pairs.tolist()}
                changed_endpoints |= {n for e in changed for n in e}
        endpoints = np.array(sorted(changed_endpoints), dtype=np.int64)
        old_reach = np.union1d(old_reach, self.upkeep.reach(old_costs, endpoints[endpoints < old_costs.shape[0]]))

        self.upkeep.patch_fragment_nodes(old_part, self.upkeep.file_triplets([self.files[p] for p in new_paths]))
        # fragments shared with other files changed their node sets: their nodes are seeds too
        live_touched = np.array([i for i in touched_frags if self.fragments[i] is not None], dtype=np.int64)
        new_seeds = np.concatenate((endpoints[self.graph.alive[endpoints]], self._file_nodes(new_paths),
                                    self.upkeep.fragment_nodes.rows(live_touched).indices.astype(np.int64)))
        self.upkeep.note_update(np.array(sorted(touched_frags), dtype=np.int64), old_reach, new_seeds,
                                defer_relations)
        self.summary.files = len(self.files)
        self.summary.fragments = self.fragments.n_alive()
        if self._needs_compaction(self.summary.fragments):
            self.compact()
        return True

    # -- compaction ----------------------------------------------------------------------------------------------
    def _needs_compaction(self, live_fragments: int) -> bool:
        """Dead ids dominate: an edited file's nodes get new ids on every update, and its changed windows new
        fragment ids, so a long editor session would grow every per-id array without bound."""
        live_nodes = self.graph.n_alive
        dead_nodes, dead_frags = self.graph.n_ids - live_nodes, len(self.fragments) - live_fragments
        return dead_nodes > max(live_nodes, _MIN_DEAD_IDS) or dead_frags > max(live_fragments, _MIN_DEAD_IDS)

    def compact(self) -> None:
        """Renumber live fragments and graph nodes densely (in id order); everything that holds an id follows.

        Nothing outside the index may keep an id across this; `epoch` counts compactions so that a holder can
        tell (the definition finder's buffer state does)."""
        n_before = len(self.fragments)
        keep = self.fragments.compact()
        fragment_map = np.full(n_before, -1, dtype=np.int64)
        fragment_map[keep] = np.arange(len(keep))
        node_map = self.graph.compact()
        for path, entry in self.files.items():
            entry.windows = fragment_map[entry.windows]
            entry.node_ids = self.graph.files[path].node_ids
        self.upkeep.compact(keep, fragment_map, node_map)
        self.term_index = self.term_index.take(keep)
        self.epoch += 1

    def prepare(self) -> None:
        """Make now what a loaded index makes when first used: its table of fragment texts by hash (the first
        update's; F's transpose and the graph's cost matrix are stored), the term index's flags of its common
        terms and the symbol lookup's method-name table (the first request's: 0.9-1.9 s on a 7.6-million-line
        monorepo) and the files' size in characters (the first update's admission check). It only reads the index
        (an update or a request that needs them meanwhile makes the same), all of the fragments' texts: those pages
        leave the process after, and the kernel reads the whole file into its cache (`store.read_ahead`), so that
        requests find their pages in memory."""
        self.fragments.index_texts()
        self.term_index.prepare()
        self.lookup.refresh()
        self._text_size(give_back=False)  # (given back below with the rest)
        page_out(self.mapped)
        read_ahead(self.mapped)

    def settle(self) -> None:
        """Make now what the first request after an update would make: the graph's cost matrix with the rows the
        update changed (the definitions' region strengths read it; 36 ms on a 7.6-million-line monorepo). It only
        reads the index: requests may read beside it, and one that needs the matrix meanwhile waits for this patch."""
        self.graph.cost_matrix()

    # -- relations (kept by `upkeep`) ----------------------------------------------------------------------------
    @property
    def relations(self) -> sp.csr_matrix:
        """W as stored: per fragment row, its top-k relations of Eq. 8 (asymmetric)."""
        return self.upkeep.relations

    @property
    def symmetric_relations(self) -> sp.csr_matrix:
        return self.upkeep.symmetric

    @property
    def relations_stale(self) -> bool:
        return self.upkeep.stale

    def refresh_relations(self, max_rows: int | None = None, progress: Progress | None = None,
                          computing: Callable[[], AbstractContextManager[object]] | None = None) -> int:
        """Recompute stale relation rows (at most `max_rows`, found and computed inside `computing()`: see
        `RelationUpkeep.refresh`); once `relations_stale` is False, W equals a full rebuild's."""
        return self.upkeep.refresh(max_rows, progress, computing)

    def region_strength(self, path: str, start_line: int, end_line: int) -> np.ndarray:
        return self.upkeep.region_strength(path, start_line, end_line)

    def relation_edge_types(self, i: int, j: int) -> list[str]:
        return self.upkeep.edge_types(i, j)

    # -- queries -------------------------------------------------------------------------------------------------
    def alive_mask(self) -> np.ndarray:
        """Per fragment id: still present (False for ids whose windows all went away)."""
        return self.fragments.alive_mask()

    def file_lines(self, path: str) -> list[str] | None:
        entry = self.files.get(path)
        return entry.lines if entry is not None else None

    def window_text(self, path: str, start: int, end: int) -> str | None:
        """Lines [start, end) of `path` when they are one of its windows, from that window's fragment (a loaded
        index decodes only those lines, not the whole file: 0.5 ms a file of a monorepo whose pages are on disk);
        None when they are no window of it."""
        entry = self.files.get(path)
        k, off = divmod(start, self.config.fragments.stride)
        if entry is None or off or k >= len(entry.windows):
            return None
        frag = self.fragments[int(entry.windows[k])]
        return frag.text if frag is not None and Location(path, start, end) in frag.locations else None

    def notice(self, message: str) -> None:
        """A warning about how this index came to be: logged now, kept in `notices` for the language server."""
        log.warning("%s", message)
        self.notices.append(message)

    # -- export --------------------------------------------------------------------------------------------------
    def to_networkx(self):
        return self.graph.to_networkx()


__all__ = ["EDGE_TYPES", "FileEntry", "Index", "IndexSummary"]


def _chars(utf8: np.ndarray) -> int:
    """Characters in UTF-8 bytes (those that do not continue one), not decoded."""
    return int(np.count_nonzero((utf8 & 0xC0) != 0x80))
