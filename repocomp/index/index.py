"""The repository index: files, fragments, code graph, fragment relation matrix W and term index.

`Index.build` makes it from scratch, `Index.open` loads it (rebuilding a corrupt, old or differently configured
one), `update_file`/`remove_file`/`update_files` patch it incrementally: only the relation rows whose node
neighbourhood (within the cutoff) touches a changed node are recomputed, which gives the same matrix as a
full rebuild.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import mmap
import os
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from graph.code_graph import EDGE_TYPES, CodeGraph
from graph.parse_pool import parsed_files
from graph.parsing import MAX_DEPTH, ParsedFile
from graph.resolve import Resolver, make_symbols
from repocomp.config.loading import load_config
from repocomp.config.schema import Config
from repocomp.errors import (
    IndexCorruptError,
    IndexMissingError,
    IndexStaleError,
    IndexUntrustedError,
    IndexUnusableError,
    RepocompError,
)
from repocomp.index import codec as index_codec
from repocomp.index import heap
from repocomp.index import trust as index_trust
from repocomp.index.fragment_store import FragmentStore
from repocomp.index.fragments import Location, line_starts, window_spans
from repocomp.index.records import FileEntry, IndexSummary
from repocomp.index.relation_upkeep import Progress, RelationUpkeep
from repocomp.index.store import (
    INDEX_FILE,
    Stored,
    fallback_dir,
    file_map,
    page_out,
    read_state,
    set_aside,
    write_mapped,
)
from repocomp.index.term_index import TermIndex
from repocomp.index.walk import FileRule, SourceFile, WalkResult, addressable, walk_repository

log = logging.getLogger(__name__)

# compact only past this many dead ids: a small repository's few edits are not worth renumbering for
_MIN_DEAD_IDS = 4096
# settings whose change invalidates a stored index, less those that only say how it is built
_STRUCTURAL_SECTIONS = ("index", "fragments", "graph", "relations")
_HOW_BUILT = {"batch_bytes", "threads"}

Checkpoint = Callable[["Index"], object]  # sees the index between two batches of a build (what it returns: unused)
Writing = Callable[[], AbstractContextManager[Any]]  # held while a batch changes the index


def _what_counts(section: Any) -> Any:
    return {k: v for k, v in section.items() if k not in _HOW_BUILT} if isinstance(section, dict) else section


Batch = list[tuple[str, str | None]]  # (path, its text, or None to read it from disk)


def _batches(files: list[tuple[str, str | None, int]], batch_bytes: int) -> list[Batch]:
    """Consecutive runs of `files` (path, text or None, characters) of about `batch_bytes` of text each (a larger
    file is a batch alone)."""
    out: list[Batch] = []
    size = 0
    for path, text, chars in files:
        if not out or (out[-1] and size + chars > batch_bytes):
            out.append([])
            size = 0
        out[-1].append((path, text))
        size += chars
    return out


class Index:
    """A repository's index: its files with their syntax and windows, the fragment store, the code graph with
    cross-file call resolution, the term index and the fragment relations (`RelationUpkeep`).

    This class builds, updates and persists them together; each part keeps its own job. Stored as an explicit
    schema of arrays (`index_codec`), never as pickled objects."""

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
        self._text_chars: int | None = None  # the files' text in characters (as the walk counts it), once counted
        self._store_dir: Path | None = None  # set when the index lives in the user's cache instead
        self.mapped: mmap.mmap | None = None  # the map of the index file a loaded index reads in place
        # what the user is told about how this index came to be (a stored one set aside, the cache used instead):
        # logged as warnings where they happen; the language server shows them too
        self.notices: list[str] = []

    # -- paths ---------------------------------------------------------------------------------------------------
    @property
    def index_dir(self) -> Path:
        """Where the index is stored: `[index] dir`, or the user's cache when that could not be written."""
        if self._store_dir is not None:
            return self._store_dir
        folder = Path(self.config.index.dir)
        return folder if folder.is_absolute() else self.root / folder

    def _index_dir_leads_out(self) -> bool:
        """The repository's own index folder (a relative `[index] dir`) resolves outside the root: a symbolic
        link in the repository leads out. Nothing is read from or written there (the user's cache is used)."""
        if self._store_dir is not None or Path(self.config.index.dir).is_absolute():
            return False
        try:
            return not self.index_dir.resolve().is_relative_to(self.root)
        except (OSError, RuntimeError):  # a symlink loop
            return True

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
    def build(cls, root: str | Path, config: Config | None = None, progress: Progress | None = None,
              checkpoint: Checkpoint | None = None, writing: Writing = contextlib.nullcontext) -> Index:
        """Index the repository's files.

        A folder with more source than `[index] batch_bytes` is built in batches (consecutive files of the walk,
        so whole directories): the first at once, each next one added as an update with its relations refreshed:
        the files, fragments, graph and term index of a build at once, the relations as an edit's update keeps
        them (a build's, but for the order of ties and what `max_reach` keeps an update from reaching; docs/
        performance.md). Before each batch after the first, `checkpoint(index)` sees the
        index so far (`summary.pending_files` the files still to come: `open` saves it there, so that an
        interrupted build resumes, and the language server answers from it); `writing()` is held while a batch
        changes it (the server's write lock)."""
        root = Path(root)
        if not root.exists():
            raise RepocompError(f"{root}: no such directory")
        if not root.is_dir():
            raise RepocompError(f"{root} is a file; give the repository's folder")
        config = config or load_config(root)
        index = cls(root, config)
        phases: dict[str, float] = {}
        t = time.perf_counter()
        walked = walk_repository(index.root, config, index.index_dir, keep_chars=config.index.batch_bytes)
        phases["walk"] = time.perf_counter() - t
        first, later = walked.files, walked.later  # the first batch's texts; the others are read batch by batch
        total, walked.files, walked.later = len(first) + len(later), [], []
        # a build in batches is the one whose peak grows with the folder: its large blocks go back when freed (at a
        # cost in time that a folder built at once is spared)
        with heap.large_blocks_given_back() if later else contextlib.nullcontext():
            index._build_files(first, phases, progress, total)
            del first
            index._add_batches(_batches([(path, None, chars) for path, chars in later], config.index.batch_bytes),
                               phases, progress, checkpoint, writing)
            index._summarize(walked, phases)
        return index

    def save_built(self) -> Path:
        """`save`, as the last step of `build`: under the heap's build threshold where the build ran under it (in
        batches), as its own saves did (an editor's later saves are not)."""
        with heap.large_blocks_given_back() if "batches" in self.summary.phases_s else contextlib.nullcontext():
            return self.save()

    def _build_files(self, files: list[SourceFile], phases: dict[str, float], progress: Progress | None,
                     total: int) -> None:
        """Index `files` into this empty index at once: parse, graph, relations, term index."""
        t = time.perf_counter()
        parsed = parsed_files([(f.text, f.language) for f in files], self.config.index.build_cores())
        for n, (source, parse) in enumerate(zip(files, parsed)):
            self._add_file(source.path, source.language, source.text, parse)
            if progress and (n % 16 == 0 or n + 1 == len(files)):
                progress(n + 1, total, "parse")
        phases["parse"] = time.perf_counter() - t

        t = time.perf_counter()
        for path in self.files:
            self._resolve(path)
        self.upkeep.rebuild_fragment_nodes()
        self.graph.cost_matrix()
        phases["graph"] = time.perf_counter() - t

        t = time.perf_counter()
        self.upkeep.recompute(np.flatnonzero(self.alive_mask()), progress)
        phases["relations"] = time.perf_counter() - t

        t = time.perf_counter()
        self.term_index = TermIndex.build(f.text if f else None for f in self.fragments)
        phases["term_index"] = time.perf_counter() - t

    def _add_batches(self, batches: list[Batch], phases: dict[str, float], progress: Progress | None,
                     checkpoint: Checkpoint | None, writing: Writing) -> None:
        """Add each batch of files as one update; the relation rows of earlier batches that the later ones leave
        stale are recomputed once, after the last (a popular definition is within reach of every batch)."""
        t = time.perf_counter()
        pending = sum(len(b) for b in batches)
        done = first_done = len(self.files)
        batches.reverse()
        while batches:
            batch = batches.pop()  # its texts (read now where the walk left them on disk) held while it is added
            self.summary.pending_files = pending
            if checkpoint is not None:
                checkpoint(self)
            with writing(), self._folds_deferred(checkpoint is not None):
                self.update_files(dict(batch))
                self.upkeep.stale_rows()  # the rows it leaves stale, recomputed once at the end
            pending -= len(batch)
            done += len(batch)
            if progress:
                progress(done, done + pending, "batch")
        self.summary.pending_files = 0
        if done > first_done:
            with writing(), self._folds_deferred(checkpoint is not None):
                self.refresh_relations(progress=progress)
            phases["batches"] = time.perf_counter() - t

    @contextlib.contextmanager
    def _folds_deferred(self, deferred: bool) -> Iterator[None]:
        """While a save follows each change at once (a build's batches saved at each checkpoint, and at its end),
        leave what the changes add to W, the term index, F, its transpose and the graph's cost matrix beside them: the
        save writes them folded in, into copies it lets go (or a block at a time), where folding them in here copied
        them whole first (for a 64 MB batch of a 7.6-million-line monorepo: 1 GB for W and the term index, 150 MB
        more for the others)."""
        if not deferred:
            yield
            return
        self.term_index.folds_deferred = self.upkeep.folds_deferred = self.graph.folds_deferred = True
        try:
            yield
        finally:
            self.term_index.folds_deferred = self.upkeep.folds_deferred = self.graph.folds_deferred = False

    def _add_file(self, path: str, language: str, text: str, parsed: ParsedFile) -> FileEntry:
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

    def _resolve(self, path: str) -> np.ndarray:
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

    def _text_size(self) -> int:
        """The files' text in characters: counted once (reading every text: a loaded index's file pages are given
        back after), then kept as files come and go (counting at every new file read 276 MB in a monorepo)."""
        if self._text_chars is None:
            self._text_chars = sum(len(e.source) if isinstance(e.source, str) else _chars(e.source)
                                   for e in self.files.values())
            page_out(self.mapped)
        return self._text_chars

    def update_files(self, changes: dict[str, str | None], removed: bool = False,
                     defer_relations: bool = False) -> None:
        """Apply a batch of changes ({relative path: text or None to read disk}) with one relation update.

        `defer_relations`: leave even the changed windows' relation rows to `refresh_relations` (the language
        server's background upkeep does it in slices), so that the update itself holds the index briefly."""
        new_texts = self._read_changes(changes, removed)
        if not new_texts:
            return
        old_paths = [p for p in new_texts if p in self.files]
        new_paths = [p for p, v in new_texts.items() if v is not None]

        # in the old graph: what the change reaches, the files that resolve into the changed ones and their calls
        old_costs = self.graph.cost_matrix()
        old_reach = self.upkeep.reach(old_costs, self._file_nodes(old_paths))
        dependants = self.resolver.readers_of(set().union(*(self.resolver.files[p].keys() for p in old_paths)))
        old_calls = {p: self.graph.files[p].call_edges for p in dependants if p in self.graph.files}
        old_part = self.upkeep.file_triplets([self.files[p] for p in old_paths])

        n_before = len(self.fragments)
        touched_frags: set[int] = set()
        for path in new_texts:
            touched_frags |= self._drop_file(path)
        added = [(path, kept) for path in new_paths if (kept := new_texts[path]) is not None]  # (language, text)
        parsed = parsed_files([(text, language) for _, (language, text) in added], self.config.index.build_cores())
        for (path, (language, text)), parse in zip(added, parsed):
            touched_frags |= set(self._add_file(path, language, text, parse).windows.tolist())
        # a window kept (same text) keeps its id and its term row; only new and removed ids change the term index
        dead_frags = self.fragments.release(touched_frags)
        retexted = sorted(set(dead_frags) | {i for i in touched_frags if i >= n_before})
        self.term_index.set_rows(retexted, (f.text if (f := self.fragments[i]) else None for i in retexted))

        # resolve again the files whose calls may have changed; a changed call edge is a seed in both graphs
        new_keys = set().union(*(self.resolver.files[p].keys() for p in new_paths))
        changed_endpoints: set[int] = set()
        for path in (dependants | self.resolver.readers_of(new_keys) | set(new_paths)) & set(self.files):
            pairs = self._resolve(path)
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
        self.summary.fragments = int(self.alive_mask().sum())
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
        update's; F's transpose and the graph's cost matrix are stored). It only reads the index (an update that
        needs it meanwhile makes the same), all of the fragments' texts: those pages go back to the kernel after
        (an update reads again the few it needs)."""
        self.fragments.index_texts()
        page_out(self.mapped)

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

    def refresh_relations(self, max_rows: int | None = None, progress: Progress | None = None) -> int:
        """Recompute stale relation rows (at most `max_rows`); once `relations_stale` is False, W equals a full
        rebuild's."""
        return self.upkeep.refresh(max_rows, progress)

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

    # -- summary and persistence ---------------------------------------------------------------------------------
    def _summarize(self, walked: WalkResult, phases: dict[str, float]) -> None:
        s = self.summary
        s.files = len(self.files)
        s.fragments = int(self.alive_mask().sum())
        s.nodes = int(self.graph.alive.sum())
        s.edges = self.graph.edge_counts()
        s.relation_nonzeros = self.upkeep.relation_count()
        s.phases_s = {k: round(v, 4) for k, v in phases.items()}
        s.skipped = dict(walked.skipped)
        # still indexed (its fragments are retrieved), but its graph stops at MAX_DEPTH levels
        deep = sorted(p for p, e in self.files.items() if e.parsed.too_deep)
        if deep:
            s.skipped["too_deep"] = len(deep)
            self.notice(f"{len(deep)} file(s) nest deeper than {MAX_DEPTH} syntax levels, their code graph is "
                        f"flattened below that (first: {deep[0]!r}); their code is still retrieved")
        s.warnings = list(walked.warnings)
        for warning in s.warnings:
            self.notice(warning)
        shown = [f"{p if addressable(p) else repr(p)}: too deep (graph flattened below {MAX_DEPTH} levels)"
                 for p in deep]
        s.notes = (s.warnings + shown + walked.notes)[:50]
        s.parse_errors = sum(1 for e in self.files.values() if e.parsed.has_errors)

    def save(self) -> Path:
        """Write the index file; a repository that cannot be written gets it in the user's cache (said once).

        Stale relation rows are recomputed first, but for a partial build's (files still to come): it keeps them
        listed, for the refresh at the build's end (or its resumption)."""
        if self.summary.pending_files == 0:
            self.refresh_relations()
        t = time.perf_counter()
        page_out(self.mapped)  # what the updates read of the file read before (a build's batch: 300 MB of it)
        meta, arrays = index_codec.encode(self)
        folder = self.index_dir
        if self._index_dir_leads_out():
            target, written = self._write_fallback(meta, arrays, "it leads outside the repository")
        else:
            try:
                target, written = write_mapped(folder, meta, arrays)
            except OSError as exc:
                if not isinstance(exc, PermissionError) and exc.errno != errno.EROFS:
                    raise RepocompError(f"cannot write the index to {folder}: {exc.strerror or exc}") from None
                target, written = self._write_fallback(meta, arrays, exc.strerror or str(exc))
        del arrays  # what the write still held (the large tables went as written; read_back trims) before reading
        # from now on read in place from what was written: what building and updating held in memory goes
        index_codec.read_back(self, meta, written)
        page_out(self.mapped)  # the file read before: what the parsed files still read from it stays readable
        self.mapped = file_map(written["text"])
        heap.trim(every_s=0)
        self.summary.phases_s["write"] = round(time.perf_counter() - t, 4)
        self.summary.index_bytes = target.stat().st_size
        return target

    def _write_fallback(self, meta: dict[str, Any], arrays: dict[str, Stored], why: str
                        ) -> tuple[Path, dict[str, np.ndarray]]:
        folder = fallback_dir(self.root)
        if folder == self.index_dir:
            raise RepocompError(f"cannot write the index to {folder}: {why}")
        self.notice(f"cannot write the index to {self.index_dir} ({why}); keeping it in {folder} instead")
        try:
            written = write_mapped(folder, meta, arrays)
        except OSError as exc:
            raise RepocompError(f"cannot write the index to {self.index_dir} ({why}) nor to {folder} "
                                f"({exc.strerror or exc})") from None
        self._store_dir = folder
        return written

    def notice(self, message: str) -> None:
        """A warning about how this index came to be: logged now, kept in `notices` for the language server."""
        log.warning("%s", message)
        self.notices.append(message)

    @classmethod
    def load(cls, root: str | Path, config: Config | None = None) -> Index:
        """The stored index: `[index] dir`, else the user's cache (where a read-only repository's index goes).

        Raises one of the `IndexUnusableError` kinds (`IndexMissingError`, `IndexStaleError`, `IndexCorruptError`)
        when no stored index can be used; no raw error of the store, codec or numpy/scipy comes out.
        """
        root = Path(root)
        config = config or load_config(root)
        index = cls(root, config)
        try:
            if index._index_dir_leads_out():  # another folder's index, whatever it holds: never read
                raise IndexMissingError(f"{index.index_dir} leads outside the repository; its index is not read")
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
        translated here, where they enter: another version -> `IndexStaleError`, anything else -> corrupt. One
        that is not this repository's (another root, a path leading out) is `IndexUntrustedError`, checked first."""
        index_trust.check_stored(meta, self.root, self.index_dir / INDEX_FILE)
        stored = meta.get("config")
        live = index_codec.plain(self.config.to_dict())
        for section in _STRUCTURAL_SECTIONS:
            if not isinstance(stored, dict) or _what_counts(stored.get(section)) != _what_counts(live[section]):
                raise IndexStaleError(f"the index at {self.index_dir} was built with other [{section}] "
                                      "settings; rebuilding")
        try:
            index_codec.decode(self, meta, arrays)
            self.mapped = file_map(arrays["text"])  # (its pages the checks touched are paged out by decode)
        except index_codec.OtherVersionError as exc:
            raise IndexStaleError(f"{self.index_dir / INDEX_FILE} was written by another repocomp ({exc}); "
                                  "rebuilding") from None
        except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError, MemoryError,
                RecursionError) as exc:
            raise IndexCorruptError(f"{self.index_dir / INDEX_FILE} is corrupt ({type(exc).__name__}: {exc}); "
                                    "rebuilding") from None

    def catch_up(self, progress: Progress | None = None, checkpoint: Checkpoint | None = None,
                 writing: Writing = contextlib.nullcontext) -> int:
        """Apply the files that differ on disk from this index's copies (added, changed, removed), in batches as a
        build adds them (`checkpoint` and `writing` as there); the walk's warnings become notices. How many files
        changed. What resumes an interrupted build, and brings a stored index up to date with the disk."""
        walked = walk_repository(self.root, self.config, self.index_dir)
        for warning in walked.warnings:  # a folder over its limits: said again for a stored index
            if warning not in self.notices:
                self.notice(warning)
        on_disk = {f.path for f in walked.files}
        gone = sorted(p for p in self.files if p not in on_disk)
        batches = _batches([(f.path, f.text, len(f.text)) for f in walked.files
                            if f.path not in self.files or self.files[f.path].text != f.text],
                           self.config.index.batch_bytes)
        changed = sum(len(b) for b in batches)
        del walked  # every file's text: the unchanged ones' go now (given back with the pages compared), the
        heap.trim(every_s=0)  # changed ones' with each batch
        page_out(self.mapped)
        if gone:
            with writing():
                self.update_files(dict.fromkeys(gone), removed=True)
        self._add_batches(batches, {}, progress, checkpoint, writing)
        return len(gone) + changed

    @classmethod
    def open(cls, root: str | Path, config: Config | None = None, build: bool = True,
             progress: Progress | None = None, checkpoint: Checkpoint | None = None,
             writing: Writing = contextlib.nullcontext) -> Index:
        """Load the stored index; build (and save) it when missing, corrupt, old or built with other settings.

        A missing or stale index (another version, other settings) is rebuilt quietly (an info log), a corrupt one
        with a warning, one that is not the repository's own (`IndexUntrustedError`) with a warning after it is set
        aside (renamed `index.bin.rejected`; a symbolic link is renamed, never followed); with `build=False` the
        `IndexUnusableError` is raised instead. When the index cannot be saved anywhere the built one is used from
        memory (and that is said). The warnings are also kept in the index's `notices`. A build in batches is saved
        before each `checkpoint`; a stored index saved so (`summary.pending_files`) is resumed: its missing files
        are added (`catch_up`)."""
        notices: list[str] = []

        def saved(index: Index) -> None:  # between batches: what an interrupted build resumes from
            try:
                index.save()
            except RepocompError as exc:
                log.info("the partial index was not saved: %s", exc)
            if checkpoint is not None:
                checkpoint(index)

        try:
            index = cls.load(root, config)
            if index.summary.pending_files:
                log.info("resuming the build of %s: %d file(s) to go", index.root, index.summary.pending_files)
                index.catch_up(progress, saved, writing)
                try:
                    index.save()
                except RepocompError as exc:
                    index.notice(f"{exc}; working from an index in memory")
            return index
        except IndexUnusableError as exc:
            if not build:
                raise
            if isinstance(exc, IndexUntrustedError):
                aside = set_aside(exc.path)
                notices.append(f"{exc}; set aside as {aside.name} and rebuilt" if aside is not None
                               else f"{exc}; not used, rebuilt")
            elif isinstance(exc, IndexCorruptError):
                notices.append(str(exc))
            else:
                log.info("%s", exc)
        for message in notices:
            log.warning("%s", message)
        index = cls.build(root, config, progress, saved, writing)
        index.notices.extend(notices)
        try:
            index.save_built()
        except RepocompError as exc:
            index.notice(f"{exc}; working from an index in memory")
        return index

    # -- export --------------------------------------------------------------------------------------------------
    def to_networkx(self):
        return self.graph.to_networkx()


__all__ = ["EDGE_TYPES", "FileEntry", "Index", "IndexSummary"]


def _chars(utf8: np.ndarray) -> int:
    """Characters in UTF-8 bytes (those that do not continue one), not decoded."""
    return int(np.count_nonzero((utf8 & 0xC0) != 0x80))
