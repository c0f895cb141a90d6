"""Building an index: from scratch (`build_index`, in batches past `[index] batch_bytes`), a stored one brought up
to date with the disk (`catch_up`: what resumes an interrupted build), and the two together (`open_index`: load
the stored index, or build and save it)."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from graph.parse_pool import parsed_files
from graph.parsing import MAX_DEPTH
from repocomp.config.loading import load_config
from repocomp.config.schema import Config
from repocomp.errors import IndexCorruptError, IndexUntrustedError, IndexUnusableError, RepocompError
from repocomp.index import heap
from repocomp.index.relation_upkeep import Progress
from repocomp.index.store import page_out, set_aside
from repocomp.index.term_index import TermIndex
from repocomp.index.walk import SourceFile, WalkResult, addressable, walk_repository

if TYPE_CHECKING:
    from repocomp.index.index import Checkpoint, Index, Writing

__all__ = ["add_batches", "build_index", "catch_up", "open_index", "save_built"]

log = logging.getLogger(__name__)

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


def build_index(cls: type[Index], root: str | Path, config: Config | None = None, progress: Progress | None = None,
                checkpoint: Checkpoint | None = None, writing: Writing = contextlib.nullcontext) -> Index:
    """Index the repository's files into a new `cls` (`Index`, which calls this: the class is handed in, so that
    this module needs no import of it).

    A folder with more source than `[index] batch_bytes` is built in batches (consecutive files of the walk,
    so whole directories): the first at once, each next one added as an update with its relations refreshed:
    the files, fragments, graph and term index of a build at once, the relations as an edit's update keeps
    them (a build's, but for the order of ties and what `max_reach` keeps an update from reaching; docs/
    performance.md). Before each batch after the first, `checkpoint(index)` sees the
    index so far (`summary.pending_files` the files still to come: `open_index` saves it there, so that an
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
        _build_files(index, first, phases, progress, total)
        del first
        add_batches(index, _batches([(path, None, chars) for path, chars in later], config.index.batch_bytes),
                    phases, progress, checkpoint, writing)
        _summarize(index, walked, phases)
    return index


def save_built(index: Index) -> Path:
    """`save`, as the last step of `build`: under the heap's build threshold where the build ran under it (in
    batches), as its own saves did (an editor's later saves are not)."""
    with heap.large_blocks_given_back() if "batches" in index.summary.phases_s else contextlib.nullcontext():
        return index.save()


def _build_files(index: Index, files: list[SourceFile], phases: dict[str, float], progress: Progress | None,
                 total: int) -> None:
    """Index `files` into the empty `index` at once: parse, graph, relations, term index."""
    t = time.perf_counter()
    parsed = parsed_files([(f.text, f.language) for f in files], index.config.index.build_cores())
    for n, (source, parse) in enumerate(zip(files, parsed)):
        index.add_file(source.path, source.language, source.text, parse)
        if progress and (n % 16 == 0 or n + 1 == len(files)):
            progress(n + 1, total, "parse")
    phases["parse"] = time.perf_counter() - t

    t = time.perf_counter()
    for path in index.files:
        index.resolve_calls(path)
    index.upkeep.rebuild_fragment_nodes()
    index.graph.cost_matrix()
    phases["graph"] = time.perf_counter() - t

    t = time.perf_counter()
    index.upkeep.recompute(np.flatnonzero(index.alive_mask()), progress)
    phases["relations"] = time.perf_counter() - t

    t = time.perf_counter()
    index.term_index = TermIndex.build(f.text if f else None for f in index.fragments)
    phases["term_index"] = time.perf_counter() - t


def add_batches(index: Index, batches: list[Batch], phases: dict[str, float], progress: Progress | None,
                 checkpoint: Checkpoint | None, writing: Writing) -> None:
    """Add each batch of files as one update; the relation rows of earlier batches that the later ones leave
    stale are recomputed once, after the last (a popular definition is within reach of every batch)."""
    t = time.perf_counter()
    pending = sum(len(b) for b in batches)
    done = first_done = len(index.files)
    batches.reverse()
    while batches:
        batch = batches.pop()  # its texts (read now where the walk left them on disk) held while it is added
        index.summary.pending_files = pending
        if checkpoint is not None:
            checkpoint(index)
        with writing(), _folds_deferred(index, checkpoint is not None):
            index.update_files(dict(batch))
            index.upkeep.stale_rows()  # the rows it leaves stale, recomputed once at the end
        pending -= len(batch)
        done += len(batch)
        if progress:
            progress(done, done + pending, "batch")
    index.summary.pending_files = 0
    if done > first_done:
        with writing(), _folds_deferred(index, checkpoint is not None):
            index.refresh_relations(progress=progress)
        phases["batches"] = time.perf_counter() - t


@contextlib.contextmanager
def _folds_deferred(index: Index, deferred: bool) -> Iterator[None]:
    """While a save follows each change at once (a build's batches saved at each checkpoint, and at its end),
    leave what the changes add to W, the term index, F, its transpose and the graph's cost matrix beside them: the
    save writes them folded in, into copies it lets go (or a block at a time), where folding them in here copied
    them whole first (for a 64 MB batch of a 7.6-million-line monorepo: 1 GB for W and the term index, 150 MB
    more for the others)."""
    if not deferred:
        yield
        return
    index.term_index.folds_deferred = index.upkeep.folds_deferred = index.graph.folds_deferred = True
    try:
        yield
    finally:
        index.term_index.folds_deferred = index.upkeep.folds_deferred = index.graph.folds_deferred = False


def _summarize(index: Index, walked: WalkResult, phases: dict[str, float]) -> None:
    s = index.summary
    s.files = len(index.files)
    s.fragments = index.fragments.n_alive()
    s.nodes = index.graph.n_alive
    s.edges = index.graph.edge_counts()
    s.relation_nonzeros = index.upkeep.relation_count()
    s.phases_s = {k: round(v, 4) for k, v in phases.items()}
    s.skipped = dict(walked.skipped)
    # still indexed (its fragments are retrieved), but its graph stops at MAX_DEPTH levels
    deep = sorted(p for p, e in index.files.items() if e.parsed.too_deep)
    if deep:
        s.skipped["too_deep"] = len(deep)
        index.notice(f"{len(deep)} file(s) nest deeper than {MAX_DEPTH} syntax levels, their code graph is "
                    f"flattened below that (first: {deep[0]!r}); their code is still retrieved")
    s.warnings = list(walked.warnings)
    for warning in s.warnings:
        index.notice(warning)
    shown = [f"{p if addressable(p) else repr(p)}: too deep (graph flattened below {MAX_DEPTH} levels)"
             for p in deep]
    s.notes = (s.warnings + shown + walked.notes)[:50]
    s.parse_errors = sum(1 for e in index.files.values() if e.parsed.has_errors)


def catch_up(index: Index, progress: Progress | None = None, checkpoint: Checkpoint | None = None,
             writing: Writing = contextlib.nullcontext) -> int:
    """Apply the files that differ on disk from this index's copies (added, changed, removed), in batches as a
    build adds them (`checkpoint` and `writing` as there); the walk's warnings become notices. How many files
    changed. What resumes an interrupted build, and brings a stored index up to date with the disk."""
    walked = walk_repository(index.root, index.config, index.index_dir)
    for warning in walked.warnings:  # a folder over its limits: said again for a stored index
        if warning not in index.notices:
            index.notice(warning)
    on_disk = {f.path for f in walked.files}
    gone = sorted(p for p in index.files if p not in on_disk)
    batches = _batches([(f.path, f.text, len(f.text)) for f in walked.files
                        if f.path not in index.files or index.files[f.path].text != f.text],
                       index.config.index.batch_bytes)
    changed = sum(len(b) for b in batches)
    del walked  # every file's text: the unchanged ones' go now (given back with the pages compared), the
    heap.trim(every_s=0)  # changed ones' with each batch
    page_out(index.mapped)
    if gone:
        with writing():
            index.update_files(dict.fromkeys(gone), removed=True)
    add_batches(index, batches, {}, progress, checkpoint, writing)
    return len(gone) + changed


def open_index(cls: type[Index], root: str | Path, config: Config | None = None, build: bool = True,
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
            catch_up(index, progress, saved, writing)
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
    index = build_index(cls, root, config, progress, saved, writing)
    index.notices.extend(notices)
    try:
        save_built(index)
    except RepocompError as exc:
        index.notice(f"{exc}; working from an index in memory")
    return index
