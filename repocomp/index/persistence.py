"""The stored index: `save_index` writes it (in the repository's `[index] dir`, else the user's cache) and reads
it back in place; `load_index` reads it, translating every error of the store, the codec and numpy/scipy into one
of the `IndexUnusableError` kinds; `_leads_out` says when the repository's own index folder may not be used."""

from __future__ import annotations

import contextlib
import errno
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from repocomp.config.loading import load_config
from repocomp.config.schema import Config
from repocomp.errors import (
    IndexCorruptError,
    IndexMissingError,
    IndexStaleError,
    IndexUnusableError,
    RepocompError,
)
from repocomp.index import codec as index_codec
from repocomp.index import heap
from repocomp.index import trust as index_trust
from repocomp.index.store import (
    INDEX_FILE,
    Stored,
    fallback_dir,
    file_map,
    page_out,
    pages_kept,
    read_state,
    write_mapped,
)

if TYPE_CHECKING:
    from repocomp.index.index import Index

__all__ = ["load_index", "save_index"]

# settings whose change invalidates a stored index, less those that only say how it is built
_STRUCTURAL_SECTIONS = ("index", "fragments", "graph", "relations")
_HOW_BUILT = {"batch_bytes", "threads"}


def _what_counts(section: Any) -> Any:
    return {k: v for k, v in section.items() if k not in _HOW_BUILT} if isinstance(section, dict) else section


def _leads_out(index: Index) -> bool:
    """The repository's own index folder (a relative `[index] dir`) resolves outside the root: a symbolic
    link in the repository leads out. Nothing is read from or written there (the user's cache is used)."""
    if index.store_dir is not None or Path(index.config.index.dir).is_absolute():
        return False
    try:
        return not index.index_dir.resolve().is_relative_to(index.root)
    except (OSError, RuntimeError):  # a symlink loop
        return True


def save_index(index: Index, while_written: Callable[[], AbstractContextManager[None]] | None = None,
               retired: list[object] | None = None) -> Path:
    """Write the index file; a repository that cannot be written gets it in the user's cache (said once).

    Stale relation rows are recomputed first, but for a partial build's (files still to come): it keeps them
    listed, for the refresh at the build's end (or its resumption). Encoding, writing and reading back, which only
    read the index, run inside `while_written` (the caller may let readers in); the refresh before and the switch
    to the written file after (assignments) do not; the file read before is let go there too, unless `retired`
    takes it."""
    if index.summary.pending_files == 0:
        index.refresh_relations()
    t = time.perf_counter()
    readers = while_written is not None
    # beside readers no page is given back: they read those of the file read before, then of the new one
    keeping = pages_kept() if readers else contextlib.nullcontext()
    with while_written() if while_written is not None else contextlib.nullcontext(), keeping:
        page_out(index.mapped)  # what the updates read of the file read before (a build's batch: 300 MB of it)
        # the large tables are made as the write reaches them (beside readers in shorter slices)
        held: list[list[Any]] = []
        meta, arrays = index_codec.encode(index, index_codec.SLICE_ROWS if readers else index_codec.BLOCK_ROWS, held)
        target, written = _write(index, meta, arrays)
        del arrays  # what the write still held (the large tables went as written) before reading
        index_codec.let_go(held)
        switch = index_codec.read_back(index, meta, written, readers=readers)
        page_out(index.mapped)  # the file read before: what the encoding read of it
    # from now on read in place from what was written: what building and updating held in memory goes
    switch()
    if retired is not None:  # the last reference to the file read before: unmapped where the caller lets it go
        retired.append(index.mapped)  # (0.4 s for the pages a 1.7 GB index's write left resident)
    index.mapped = file_map(written["text"])
    if while_written is None:  # (a caller that lets readers in trims once its lock is let go)
        heap.trim(every_s=0)
    index.summary.phases_s["write"] = round(time.perf_counter() - t, 4)
    index.summary.index_bytes = target.stat().st_size
    return target


def _write(index: Index, meta: dict[str, Any], arrays: dict[str, Stored]) -> tuple[Path, dict[str, np.ndarray]]:
    folder = index.index_dir
    if _leads_out(index):
        return _write_fallback(index, meta, arrays, "it leads outside the repository")
    try:
        return write_mapped(folder, meta, arrays)
    except OSError as exc:
        if not isinstance(exc, PermissionError) and exc.errno != errno.EROFS:
            raise RepocompError(f"cannot write the index to {folder}: {exc.strerror or exc}") from None
        return _write_fallback(index, meta, arrays, exc.strerror or str(exc))


def _write_fallback(index: Index, meta: dict[str, Any], arrays: dict[str, Stored], why: str
                    ) -> tuple[Path, dict[str, np.ndarray]]:
    folder = fallback_dir(index.root)
    if folder == index.index_dir:
        raise RepocompError(f"cannot write the index to {folder}: {why}")
    index.notice(f"cannot write the index to {index.index_dir} ({why}); keeping it in {folder} instead")
    try:
        written = write_mapped(folder, meta, arrays)
    except OSError as exc:
        raise RepocompError(f"cannot write the index to {index.index_dir} ({why}) nor to {folder} "
                            f"({exc.strerror or exc})") from None
    index.store_dir = folder
    return written


def load_index(cls: type[Index], root: str | Path, config: Config | None = None) -> Index:
    """The stored index: `[index] dir`, else the user's cache (where a read-only repository's index goes).

    Raises one of the `IndexUnusableError` kinds (`IndexMissingError`, `IndexStaleError`, `IndexCorruptError`)
    when no stored index can be used; no raw error of the store, codec or numpy/scipy comes out.
    """
    root = Path(root)
    with heap.uncollected(collect=True):  # the collector's passes over what a load makes: half its time
        return _load(cls, root, config or load_config(root))


def _load(cls: type[Index], root: Path, config: Config) -> Index:
    index = cls(root, config)
    try:
        if _leads_out(index):  # another folder's index, whatever it holds: never read
            raise IndexMissingError(f"{index.index_dir} leads outside the repository; its index is not read")
        _restore(index, *read_state(index.index_dir))
        return index
    except IndexUnusableError as exc:
        cached = cls(root, config)
        cached.store_dir = fallback_dir(cached.root)
        if cached.store_dir == index.index_dir or not (cached.store_dir / INDEX_FILE).is_file():
            raise
        try:
            _restore(cached, *read_state(cached.index_dir))
        except IndexUnusableError as cached_exc:  # the more telling one: the cache's when the folder has none
            raise (cached_exc if isinstance(exc, IndexMissingError) else exc) from None
        return cached


def _restore(index: Index, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    """Fill the empty `index` from a stored state; the codec's, term index's and numpy/scipy's errors are
    translated here, where they enter: another version -> `IndexStaleError`, anything else -> corrupt. One
    that is not this repository's (another root, a path leading out) is `IndexUntrustedError`, checked first."""
    index_trust.check_stored(meta, index.root, index.index_dir / INDEX_FILE)
    stored = meta.get("config")
    live = index_codec.plain(index.config.to_dict())
    for section in _STRUCTURAL_SECTIONS:
        if not isinstance(stored, dict) or _what_counts(stored.get(section)) != _what_counts(live[section]):
            raise IndexStaleError(f"the index at {index.index_dir} was built with other [{section}] "
                                  "settings; rebuilding")
    try:
        index_codec.decode(index, meta, arrays)
        index.mapped = file_map(arrays["text"])  # (its pages the checks touched are paged out by decode)
    except index_codec.OtherVersionError as exc:
        raise IndexStaleError(f"{index.index_dir / INDEX_FILE} was written by another repocomp ({exc}); "
                              "rebuilding") from None
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError, MemoryError,
            RecursionError) as exc:
        raise IndexCorruptError(f"{index.index_dir / INDEX_FILE} is corrupt ({type(exc).__name__}: {exc}); "
                                "rebuilding") from None
