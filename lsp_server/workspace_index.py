"""One repocomp index per workspace folder: built in the background, kept current file by file.

- `WorkspaceIndexes.add_folder` registers a folder; `start` builds (or loads) its index in a daemon thread,
  reporting progress through a callback (the server turns it into `$/progress`).
- `file_changed` / `file_deleted` (from didSave, workspace/didChangeWatchedFiles, or the watchdog observer for
  changes made outside the editor) queue a change; one worker thread coalesces a burst (a checkout touching 500
  files) into one batch of `Index.update_files` calls (a missing file is removed), applied in chunks so
  completions interleave.
- A stored index loaded at start-up is brought up to date with the disk (files changed while no server ran).
- Readers (completions) and the writer (the batch worker) share a folder's index under a reader-writer lock;
  readers take it from the event loop without blocking it (`async with folder.reading()`).

Nothing here knows about LSP.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from repocomp.config import Config

if TYPE_CHECKING:
    from repocomp.index import Index

logger = logging.getLogger(__name__)

ProgressCallback = Callable[["FolderIndex", int, int, str], None]
StateCallback = Callable[["FolderIndex"], None]

_NOISE_PARTS = frozenset({".git", ".hg", ".svn", "__pycache__", "node_modules", ".mypy_cache", ".pytest_cache",
                          ".tox", ".venv", "venv", ".idea", ".vscode"})
_CHUNK = 50  # files per write-lock hold (one relation update each), so completions interleave with a large batch
# Background upkeep between changes: stale relation rows are recomputed a slice per write-lock hold (about 6 ms
# for 16 rows on diffusers, 17 ms for 64), with a gap between slices where waiting requests take the read lock (a
# request waits one slice at most); an index whose files changed is saved once the folder has been quiet a while.
_REFRESH_ROWS = 16
_SLICE_GAP_S = 0.005
_UPKEEP_POLL_S = 0.25
_SAVE_AFTER_S = 30.0


class RWLock:
    """Many readers or one writer; writers are preferred so a stream of completions cannot starve updates."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False
        self._waiting_writers = 0

    def try_acquire_read(self) -> bool:
        with self._cond:
            if self._writer or self._waiting_writers:
                return False
            self._readers += 1
            return True

    def acquire_read(self) -> None:
        with self._cond:
            while self._writer or self._waiting_writers:
                self._cond.wait()
            self._readers += 1

    def release_read(self) -> None:
        with self._cond:
            self._readers -= 1
            if self._readers == 0:
                self._cond.notify_all()

    def acquire_write(self) -> None:
        with self._cond:
            self._waiting_writers += 1
            while self._writer or self._readers:
                self._cond.wait()
            self._waiting_writers -= 1
            self._writer = True

    def release_write(self) -> None:
        with self._cond:
            self._writer = False
            self._cond.notify_all()


@dataclass
class FolderIndex:
    """A workspace folder and its index; `index` is None until `state` is "ready"."""

    root: Path
    config: Config
    state: str = "pending"  # pending -> building -> ready | failed
    index: "Index | None" = None
    error: str = ""
    lock: RWLock = field(default_factory=RWLock)
    version: int = 0  # bumped by every applied batch (lets tests and the bench see a save land)
    saved_version: int = 0  # the version last written to disk
    changed_at: float = 0.0  # time.monotonic() of the last applied batch
    _deferred: set[Path] = field(default_factory=set)  # changes seen while building; replayed from disk after

    @property
    def ready(self) -> bool:
        return self.state == "ready" and self.index is not None

    def relative(self, path: Path) -> str | None:
        """`path` relative to the root (POSIX), or None when it lies outside."""
        try:
            return path.resolve().relative_to(self.root).as_posix()
        except ValueError:
            try:
                return path.absolute().relative_to(self.root).as_posix()
            except ValueError:
                return None

    def id_counts(self) -> dict[str, int] | None:
        """Ids the index holds and how many are live, and its stale relation rows (None while it is written or
        not ready): what a long session must keep flat."""
        index = self.index
        if not self.ready or index is None or not self.lock.try_acquire_read():
            return None
        try:
            return {"nodes": index.graph.n_ids, "nodes_alive": index.graph.n_alive,
                    "fragments": len(index.fragments), "fragments_alive": int(index.alive_mask().sum()),
                    "stale": int(index.relations_stale), "compactions": index.epoch}
        finally:
            self.lock.release_read()

    @contextlib.asynccontextmanager
    async def reading(self) -> AsyncIterator["Index | None"]:
        """Hold the read lock (taken off the event loop when a batch is being written) and yield the index."""
        if not self.lock.try_acquire_read():
            acquiring = asyncio.get_running_loop().run_in_executor(None, self.lock.acquire_read)
            try:
                await asyncio.shield(acquiring)
            except asyncio.CancelledError:  # the thread still gets the lock: hand it back when it does
                acquiring.add_done_callback(lambda f: None if f.cancelled() or f.exception() else
                                            self.lock.release_read())
                raise
        try:
            yield self.index if self.ready else None
        finally:
            self.lock.release_read()


@dataclass
class _Change:
    text: str | None  # None: read from disk (missing file = removed)
    deleted: bool = False


class WorkspaceIndexes:
    """All folders' indexes, the coalescing update worker and the file-system observer."""

    def __init__(
        self,
        *,
        on_progress: ProgressCallback | None = None,
        on_state: StateCallback | None = None,
        on_batch: StateCallback | None = None,
        debounce_s: float = 0.03,
        max_delay_s: float = 0.3,
        save_after_s: float = _SAVE_AFTER_S,
    ) -> None:
        self.folders: dict[Path, FolderIndex] = {}
        self._on_progress = on_progress
        self._on_state = on_state
        self._on_batch = on_batch  # called under the write lock after each applied chunk
        self._debounce_s = debounce_s
        self._max_delay_s = max_delay_s
        self._save_after_s = save_after_s
        self._pending: dict[Path, _Change] = {}
        self._cond = threading.Condition()
        self._closed = False
        self._busy = False
        self._observer: Any = None
        self._worker = threading.Thread(target=self._run_worker, name="repocomp-index-updates", daemon=True)
        self._worker.start()

    # ----- folders -----

    def add_folder(self, root: Path, config: Config) -> FolderIndex:
        root = Path(root).resolve()
        folder = self.folders.get(root)
        if folder is None:
            folder = FolderIndex(root=root, config=config)
            self.folders[root] = folder
        return folder

    def remove_folder(self, root: Path) -> None:
        self.folders.pop(Path(root).resolve(), None)

    def folder_for(self, path: Path) -> FolderIndex | None:
        """The innermost folder containing `path`."""
        best: FolderIndex | None = None
        for folder in self.folders.values():
            if folder.relative(path) is not None and (best is None or len(folder.root.parts) > len(best.root.parts)):
                best = folder
        return best

    def start(self, folder: FolderIndex) -> threading.Thread:
        """Build or load `folder`'s index in a daemon thread; never blocks the caller."""
        folder.state = "building"
        thread = threading.Thread(target=self._build, args=(folder,), name=f"repocomp-index:{folder.root.name}",
                                  daemon=True)
        thread.start()
        return thread

    def _build(self, folder: FolderIndex) -> None:
        from repocomp.index import Index  # heavy import, kept off the server's start-up path

        def progress(done: int, total: int, phase: str) -> None:
            if self._on_progress is not None:
                self._on_progress(folder, done, total, phase)

        started = time.perf_counter()
        try:
            index = Index.open(folder.root, folder.config, build=True, progress=progress)
            stale = _stale_files(index)
            if stale:
                logger.info("index of %s: %d file(s) changed since it was stored", folder.root.name, len(stale))
                for i in range(0, len(stale), _CHUNK * 4):
                    index.update_files(dict(stale[i : i + _CHUNK * 4]))
        except Exception as exc:  # a failing index must not take the server down; completions stay in-file
            logger.exception("indexing %s failed", folder.root)
            folder.state, folder.error = "failed", str(exc) or type(exc).__name__
        else:
            folder.lock.acquire_write()
            try:
                folder.index, folder.state = index, "ready"
                deferred, folder._deferred = folder._deferred, set()
            finally:
                folder.lock.release_write()
            logger.info("index of %s ready in %.1f s", folder.root, time.perf_counter() - started)
            for path in deferred:  # changes that raced the build: replay from disk
                self.file_changed(path)
        if self._on_state is not None:
            self._on_state(folder)

    # ----- changes -----

    def is_noise(self, path: Path, folder: FolderIndex | None = None) -> bool:
        """Paths never worth indexing: VCS and cache directories, the index directory itself."""
        parts = set(path.parts)
        if parts & _NOISE_PARTS:
            return True
        folder = folder or self.folder_for(path)
        if folder is not None:
            index_dir = Path(folder.config.index.dir)
            index_dir = index_dir if index_dir.is_absolute() else folder.root / index_dir
            try:
                path.relative_to(index_dir)
                return True
            except ValueError:
                pass
        return False

    def file_changed(self, path: Path, text: str | None = None) -> None:
        """Queue an update of `path` (with its saved `text`, or None to read the disk)."""
        self._queue(Path(path), _Change(text=text))

    def file_deleted(self, path: Path) -> None:
        self._queue(Path(path), _Change(text=None, deleted=True))

    def _queue(self, path: Path, change: _Change) -> None:
        path = path if path.is_absolute() else path.absolute()
        if self.is_noise(path):
            return
        with self._cond:
            self._pending[path] = change
            self._cond.notify_all()

    def pending(self) -> int:
        """Changes queued or being applied."""
        with self._cond:
            return len(self._pending) + self._busy

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Block until every queued change is applied (tests and the benchmark)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._pending or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def _run_worker(self) -> None:
        more_upkeep = False
        while True:
            with self._cond:
                if not self._pending and not self._closed:
                    self._cond.wait(_SLICE_GAP_S if more_upkeep else _UPKEEP_POLL_S)
                if self._closed:
                    return
                if not self._pending:
                    batch = None
                else:
                    first = time.monotonic()
                    # coalesce: wait for a quiet period (or the max delay) so a burst becomes one batch
                    while not self._closed:
                        count = len(self._pending)
                        left = min(self._debounce_s, first + self._max_delay_s - time.monotonic())
                        if left <= 0:
                            break
                        self._cond.wait(left)
                        if len(self._pending) == count:
                            break
                    batch, self._pending = self._pending, {}
                    self._busy = True
            if batch is None:
                try:
                    more_upkeep = self._upkeep()
                except Exception:  # pragma: no cover - upkeep must never stop the worker
                    logger.exception("index upkeep failed")
                    more_upkeep = False
                continue
            try:
                self._apply(batch)
            except Exception:  # pragma: no cover - _apply isolates per file; this is the last resort
                logger.exception("applying a batch of %d file changes failed", len(batch))
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _apply(self, batch: dict[Path, _Change]) -> None:
        by_folder: dict[Path, dict[str, str | None]] = {}
        for path, change in batch.items():
            folder = self.folder_for(path)
            if folder is None:
                continue
            rel = folder.relative(path)
            if rel is None or rel == ".":
                continue
            if not folder.ready:
                folder._deferred.add(path)
                continue
            # None: the index reads the disk (a missing file is removed); a deleted file is missing by now
            by_folder.setdefault(folder.root, {})[rel] = None if change.deleted else change.text
        for root, changes in by_folder.items():
            folder = self.folders.get(root)
            if folder is None or folder.index is None:
                continue
            started = time.perf_counter()
            items = sorted(changes.items())
            for i in range(0, len(items), _CHUNK):
                chunk = dict(items[i : i + _CHUNK])
                folder.lock.acquire_write()
                try:
                    self._apply_chunk(folder, chunk)
                    folder.version += 1
                    folder.changed_at = time.monotonic()
                    if self._on_batch is not None:
                        self._on_batch(folder)
                finally:
                    folder.lock.release_write()
            logger.info("index of %s: %d file(s) updated in %.0f ms", folder.root.name, len(items),
                        (time.perf_counter() - started) * 1000)

    def _upkeep(self) -> bool:
        """Between changes, one bounded step: a slice of stale relation rows, or saving a quiet changed index.

        Returns True while relation rows remain stale (the worker comes straight back for the next slice; a
        change that arrives meanwhile goes first)."""
        for folder in list(self.folders.values()):
            index = folder.index
            if not folder.ready or index is None:
                continue
            if index.relations_stale:
                folder.lock.acquire_write()
                try:
                    index.refresh_relations(max_rows=_REFRESH_ROWS)
                    return index.relations_stale
                finally:
                    folder.lock.release_write()
            if folder.version != folder.saved_version and time.monotonic() - folder.changed_at >= self._save_after_s:
                self._save(folder)
        return False

    def _save(self, folder: FolderIndex) -> None:
        """Write the folder's index (under the write lock: a request's buffer sync must not change it mid-write)."""
        index = folder.index
        if index is None:
            return
        folder.lock.acquire_write()
        try:
            version = folder.version
            index.save()
            folder.saved_version = version
            logger.info("index of %s saved", folder.root.name)
        except Exception as exc:  # a read-only disk: keep serving from memory, say it once per version
            folder.saved_version = folder.version
            logger.warning("saving the index of %s failed: %s", folder.root, exc)
        finally:
            folder.lock.release_write()

    def _apply_chunk(self, folder: FolderIndex, changes: dict[str, str | None]) -> None:
        index = folder.index
        assert index is not None
        try:
            index.update_files(changes, defer_relations=True)  # rows follow in `_upkeep` slices: a short hold
            return
        except Exception as exc:  # find the bad file(s); apply the rest one by one
            logger.warning("batch update of %d file(s) failed (%s); retrying file by file", len(changes), exc)
        for rel, text in changes.items():
            try:
                index.update_files({rel: text}, defer_relations=True)
            except Exception as exc:
                logger.warning("index update of %s failed: %s", rel, exc)

    # ----- watchdog -----

    def watch(self, folders: Iterable[FolderIndex] | None = None) -> None:
        """Observe the folders for changes made outside the editor (git checkout, codegen)."""
        from watchdog.events import FileSystemEvent, FileSystemEventHandler
        from watchdog.observers import Observer

        indexes = self

        class _Handler(FileSystemEventHandler):
            def on_any_event(self, event: FileSystemEvent) -> None:
                if event.event_type in ("opened", "closed_no_write"):
                    return
                try:
                    indexes._on_fs_event(event)
                except Exception:  # pragma: no cover - never let the observer thread die
                    logger.exception("file watcher event %r failed", event)

        if self._observer is None:
            self._observer = Observer()
            self._observer.daemon = True
            self._observer.start()
        for folder in folders if folders is not None else self.folders.values():
            try:
                self._observer.schedule(_Handler(), str(folder.root), recursive=True)
            except OSError as exc:
                logger.warning("cannot watch %s: %s (live updates come from the editor only)", folder.root, exc)

    def _on_fs_event(self, event: Any) -> None:
        src = Path(_decode(event.src_path))
        if event.event_type == "moved":
            dest = Path(_decode(event.dest_path))
            if event.is_directory:
                self._dir_gone(src)
                self._dir_added(dest)
            else:
                self.file_deleted(src)
                self.file_changed(dest)
        elif event.event_type == "deleted":
            if event.is_directory:
                self._dir_gone(src)
            else:
                self.file_deleted(src)
        elif not event.is_directory and event.event_type in ("created", "modified", "closed"):
            self.file_changed(src)

    def _dir_gone(self, directory: Path) -> None:
        folder = self.folder_for(directory)
        if folder is None:
            return
        rel = folder.relative(directory)
        if rel is None:
            return
        prefix = "" if rel == "." else rel + "/"
        for known in list(_index_paths(folder.index)):
            if known.startswith(prefix):
                self.file_deleted(folder.root / known)

    def _dir_added(self, directory: Path) -> None:
        for path in directory.rglob("*"):
            if path.is_file():
                self.file_changed(path)

    # ----- lifecycle -----

    def close(self) -> None:
        """Stop the observer and the worker (queued changes are dropped); save indexes whose files changed."""
        if self._observer is not None:
            try:
                self._observer.stop()
                self._observer.join(timeout=2)
            except Exception:  # pragma: no cover
                logger.debug("observer stop failed", exc_info=True)
            self._observer = None
        with self._cond:
            self._closed = True
            self._pending.clear()
            self._cond.notify_all()
        self._worker.join(timeout=2)
        for folder in list(self.folders.values()):
            if folder.ready and folder.version != folder.saved_version:
                self._save(folder)


def _stale_files(index: Any) -> list[tuple[str, str | None]]:
    """(path, text or None = removed) for each file whose disk content differs from the index's copy."""
    from repocomp.walk import walk_repository

    walked = walk_repository(index.root, index.config, index.index_dir)
    known = getattr(index, "files", {})
    on_disk = {f.path: f.text for f in walked.files}
    changed: list[tuple[str, str | None]] = [(p, t) for p, t in on_disk.items()
                                             if p not in known or known[p].text != t]
    changed += [(p, None) for p in known if p not in on_disk]
    return sorted(changed, key=lambda c: c[0])


def _decode(path: str | bytes) -> str:
    return path.decode("utf-8", "surrogateescape") if isinstance(path, bytes) else path


def _index_paths(index: Any) -> Iterable[str]:
    """Files the index knows, when it says (duck-typed: `files()`, `paths()` or a `files` mapping)."""
    if index is None:
        return ()
    for attr in ("paths", "files"):
        value = getattr(index, attr, None)
        if callable(value):
            try:
                value = value()
            except Exception:
                return ()
        if value is not None:
            try:
                return [str(p) for p in value]
            except TypeError:
                continue
    return ()
