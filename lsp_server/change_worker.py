"""The change queue and its worker thread: file changes in, index updates out, upkeep between them.

- `file_changed` / `file_deleted` (from didSave, workspace/didChangeWatchedFiles, or the file-system watcher)
  queue a change, unless the path is noise (`is_noise`); the latest change of a path wins.
- One worker thread coalesces a burst (a checkout touching 500 files) into one batch of `Index.update_files` calls
  (a missing file is removed), applied in chunks under the folder's write lock so completions interleave (each
  chunk read and parsed first while requests read on: `Index.prepare_update`); a change to a folder still building
  is deferred (the build replays it from disk).
- Between changes the worker does the upkeep: stale relation rows are recomputed a slice at a time, and an index
  whose files changed is saved once its folder has been quiet a while (and on `close`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from graph import maxproduct
from lsp_server.folder_index import FolderIndex, FolderRegistry, StateCallback
from lsp_server.foreground import FOREGROUND
from lsp_server.options import ServerOptions
from repocomp.index import heap
from repocomp.index.yielding import yielding_to

logger = logging.getLogger(__name__)

_NOISE_PARTS = frozenset({".git", ".hg", ".svn", "__pycache__", "node_modules", ".mypy_cache", ".pytest_cache",
                          ".tox", ".venv", "venv", ".idea", ".vscode"})
CHUNK = 50  # files per write-lock hold (one relation update each), so completions interleave with a large batch
# Background upkeep between changes: stale relation rows are recomputed a slice per write-lock hold (about 6 ms
# for 16 rows on diffusers, 17 ms for 64), with a gap between slices where waiting requests take the read lock (a
# request waits one slice at most); an index whose files changed is saved once the folder has been quiet a while.
# A slice waits for a gap in the requests (typing sends one per keystroke) that it fits in, even at 20 keys a
# second, but for no longer than a second: stale rows are caught up in the pauses instead of delaying keystrokes.
_REFRESH_ROWS = 16
_REQUEST_GAP_S = 0.03  # a gap in the requests that an update or a slice waits for (keys typed in a burst come closer)
_REFRESH_MAX_DEFER_S = 1.0
_SLICE_GAP_S = 0.005
_UPKEEP_POLL_S = 0.25
# An update waits for the requests being answered and a gap after them before it takes the write lock, at most
# this long each time: a request reads under the read lock and takes it again after its model round, so an update
# taken beside it (a buffer just opened, applied with its first request) held that request 30-90 ms on a
# 7.6-million-line monorepo, and one taken between two keys of a burst held the second as long
_UPDATE_YIELDS_S = 0.25
SAVE_AFTER_S = ServerOptions.save_after_ms / 1000  # the server option's default (`server.saveAfterMs`)


@dataclass
class _Change:
    text: str | None  # None: read from disk (missing file = removed)
    deleted: bool = False


class ChangeWorker:
    """The queue of file changes of the registry's folders and the thread that applies them."""

    def __init__(
        self,
        registry: FolderRegistry,
        *,
        on_batch: StateCallback | None = None,
        debounce_s: float = 0.03,
        max_delay_s: float = 0.3,
        save_after_s: float = SAVE_AFTER_S,
    ) -> None:
        self._registry = registry
        self._on_batch = on_batch  # called under the write lock after each applied chunk
        self._debounce_s = debounce_s
        self._max_delay_s = max_delay_s
        self._save_after_s = save_after_s
        self._pending: dict[Path, _Change] = {}
        self._cond = threading.Condition()
        self._closed = False
        self._busy = False
        self._worker = threading.Thread(target=self._run_worker, name="repocomp-index-updates", daemon=True)
        self._worker.start()

    def is_noise(self, path: Path, folder: FolderIndex | None = None) -> bool:
        """Paths never worth indexing: VCS and cache directories, the index directory itself."""
        parts = set(path.parts)
        if parts & _NOISE_PARTS:
            return True
        folder = folder or self._registry.folder_for(path)
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
                more_upkeep = self._safe_upkeep()
                continue
            changed = True
            try:
                changed = self._apply(batch)
            except Exception:  # pragma: no cover - _apply isolates per file; this is the last resort
                logger.exception("applying a batch of %d file changes failed", len(batch))
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
            if not changed:  # documents opened and closed as the index holds them: the folders are as quiet as
                more_upkeep = self._safe_upkeep()  # before, so their upkeep (a refresh slice, a save) goes on
            heap.trim()  # also when continuous typing never lets the refresh catch up (at most every TRIM_EVERY_S)

    def _apply(self, batch: dict[Path, _Change]) -> bool:
        """Apply `batch`; whether it changed any folder's index."""
        changed = False
        by_folder: dict[Path, dict[str, str | None]] = {}
        for path, change in batch.items():
            folder = self._registry.folder_for(path)
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
            folder = self._registry.folders.get(root)
            if folder is None or folder.index is None:
                continue
            started = time.perf_counter()
            items = sorted(changes.items())
            for i in range(0, len(items), CHUNK):
                chunk = dict(items[i : i + CHUNK])
                FOREGROUND.wait_unserved(_UPDATE_YIELDS_S, _REQUEST_GAP_S)
                folder.lock.acquire_write()
                applied = False
                try:
                    if self._apply_chunk(folder, chunk):  # a buffer opened or closed as the index holds it: none
                        changed = applied = True
                        folder.version += 1
                        folder.changed_at = time.monotonic()
                        if self._on_batch is not None:
                            self._on_batch(folder)
                finally:
                    folder.lock.release_write()
                if applied:  # off the next request's path, requests reading beside it
                    folder.lock.acquire_read()
                    try:
                        if folder.index is not None:
                            folder.index.settle()
                    finally:
                        folder.lock.release_read()
            logger.info("index of %s: %d file(s) updated in %.0f ms", folder.root.name, len(items),
                        (time.perf_counter() - started) * 1000)
        return changed

    def _safe_upkeep(self) -> bool:
        try:
            return self._upkeep()
        except Exception:  # pragma: no cover - upkeep must never stop the worker
            logger.exception("index upkeep failed")
            return False

    def _upkeep(self) -> bool:
        """Between changes, one bounded step: a slice of stale relation rows, or saving a quiet changed index.

        Returns True while relation rows remain stale (the worker comes straight back for the next slice; a
        change that arrives meanwhile goes first)."""
        for folder in list(self._registry.folders.values()):
            index = folder.index
            if not folder.ready or index is None:
                continue
            if index.relations_stale:
                now = time.monotonic()
                if (now - folder.read_at < _REQUEST_GAP_S or FOREGROUND.answering()) \
                        and now - folder.refreshed_at < _REFRESH_MAX_DEFER_S:
                    return True  # a request runs or just ran: another may follow at once; come back after the gap
                folder.lock.acquire_write()
                try:
                    index.refresh_relations(max_rows=_REFRESH_ROWS, computing=folder.shared)  # readers read on
                    if index.relations_stale:
                        return True
                finally:
                    folder.refreshed_at = time.monotonic()
                    folder.lock.release_write()
                # caught up after a burst of edits (once per burst, so no rate limit: a trim takes ~1 ms): what
                # the updates freed goes back to the system, and the pages their graph searches wrote
                heap.trim(every_s=0)
                maxproduct.release_work_pages()
                return False
            if folder.version != folder.saved_version and time.monotonic() - folder.changed_at >= self._save_after_s:
                self._save(folder)
        return False

    def _save(self, folder: FolderIndex) -> None:
        """Write the folder's index: encoded, written and read back while requests read on (`FolderIndex.shared`:
        this thread applies the changes, so none comes meanwhile), switched to the written file under the write
        lock; how long that lock was held at most is kept for `repocomp/stats`."""
        index = folder.index
        if index is None:
            return
        began = time.monotonic()
        folder.lock.acquire_write()
        held = [time.monotonic()]  # the write lock held from, let go for readers at, held again at

        @contextlib.contextmanager
        def readers_in() -> Iterator[None]:
            try:
                with folder.shared():
                    held.append(time.monotonic())
                    yield
            finally:
                held.append(time.monotonic())

        retired: list[object] = []
        slices = None
        try:
            version = folder.version
            # the editor first: the save waits between its slices while a request is answered
            with heap.uncollected(), FOREGROUND.slices() as slices, yielding_to(slices):
                index.save(while_written=readers_in, retired=retired)
            folder.saved_version = version
            logger.info("index of %s saved", folder.root.name)
        except Exception as exc:  # a read-only disk: keep serving from memory, say it once per version
            folder.saved_version = folder.version
            logger.warning("saving the index of %s failed: %s", folder.root, exc)
        finally:
            folder.lock.release_write()
            ended = time.monotonic()
            acquired, shared_from, shared_to = held if len(held) == 3 else (held[0], ended, ended)
            folder.last_save = (began, ended)
            folder.last_save_held_ms = round(max(shared_from - acquired, ended - shared_to) * 1000, 1)
            folder.last_save_overlap_ms = round(slices.longest_ms, 1) if slices is not None else None
            retired.clear()  # the file read before, unmapped with no lock held
            heap.trim(every_s=0)  # what the index let go of at the switch

    def _apply_chunk(self, folder: FolderIndex, changes: dict[str, str | None]) -> bool:
        """Whether the changes changed the index."""
        index = folder.index
        assert index is not None
        try:
            # requests read on while the texts are parsed and what the change reaches in the graph is found; the
            # relation rows follow in `_upkeep` slices: a short hold
            with folder.shared():
                prepared = index.prepare_update(changes)
                FOREGROUND.wait_unserved(_UPDATE_YIELDS_S, _REQUEST_GAP_S)
            return prepared is not None and index.apply_update(prepared, defer_relations=True)
        except Exception as exc:  # find the bad file(s); apply the rest one by one
            logger.warning("batch update of %d file(s) failed (%s); retrying file by file", len(changes), exc)
        changed = False
        for rel, text in changes.items():
            try:
                changed |= index.update_files({rel: text}, defer_relations=True)
            except Exception as exc:
                logger.warning("index update of %s failed: %s", rel, exc)
        return changed

    def close(self) -> None:
        """Stop the worker (queued changes are dropped); save indexes whose files changed."""
        with self._cond:
            self._closed = True
            self._pending.clear()
            self._cond.notify_all()
        self._worker.join(timeout=2)
        for folder in list(self._registry.folders.values()):
            if folder.ready and folder.version != folder.saved_version:
                self._save(folder)
