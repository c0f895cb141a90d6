"""A workspace folder and its index, the reader-writer lock they are shared under, and the registry of folders.

- `FolderIndex`: a folder's root, config, build state and index; `version`/`saved_version`/`changed_at` let the
  change worker see what to save and when; readers take the index from the event loop without blocking it
  (`async with folder.reading()`), and hand it back while a model generates (`folder.released()`).
- `RWLock`: many readers (completions) or one writer (the change worker), writers preferred.
- `FolderRegistry`: the folders by root, and the innermost one that holds a path.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from lsp_server.foreground import FOREGROUND
from repocomp.config.schema import Config

if TYPE_CHECKING:
    from repocomp.index import Index

StateCallback = Callable[["FolderIndex"], None]


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

    def downgrade(self) -> None:
        """The writer becomes a reader, with no writer in between: readers may join it; writers still wait."""
        with self._cond:
            self._writer = False
            self._readers += 1
            self._cond.notify_all()


@dataclass
class FolderIndex:
    """A workspace folder and its index; `index` is None until `state` is "ready"."""

    root: Path
    config: Config
    # pending -> building [-> partial: a build in batches, between two of them] -> ready | failed
    state: str = "pending"
    index: Index | None = None
    error: str = ""
    notices: list[str] = field(default_factory=list)  # said once the index is ready (a stored index set aside)
    lock: RWLock = field(default_factory=RWLock)
    version: int = 0  # bumped by every applied batch (lets tests and the bench see a save land)
    saved_version: int = 0  # the version last written to disk
    # time.monotonic() when the last save began (waiting for the write lock) and ended: `bench lsp` times the
    # requests that overlapped it (the same clock in every process of the machine)
    last_save: tuple[float, float] | None = None
    # of that save: the longest time it held the write lock (ms), what a request may have waited for it
    last_save_held_ms: float | None = None
    # and the most user CPU time it spent in one slice a request came in (ms): at most what it delayed the request
    last_save_overlap_ms: float | None = None
    changed_at: float = 0.0  # time.monotonic() of the last applied batch
    read_at: float = 0.0  # time.monotonic() when a request last finished reading the index
    refreshed_at: float = 0.0  # time.monotonic() of the last slice of the background relation refresh
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
                    "fragments": len(index.fragments), "fragments_alive": index.fragments.n_alive(),
                    "stale": int(index.relations_stale), "compactions": index.epoch}
        finally:
            self.lock.release_read()

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """Hold the write lock (a thread that changes the index: the change worker, a build's next batch)."""
        self.lock.acquire_write()
        try:
            yield
        finally:
            self.lock.release_write()

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        """Inside `writing()`: while the writer only reads (a save writing the index file), requests read beside
        it; the write lock is held again after (a thread that changes the index still waits for all of it)."""
        self.lock.downgrade()
        try:
            yield
        finally:
            self.lock.release_read()
            self.lock.acquire_write()

    @contextlib.asynccontextmanager
    async def reading(self) -> AsyncIterator[Index | None]:
        """Hold the read lock (taken off the event loop when a batch is being written) and yield the index. While
        a build adds its next batch (state "partial") nothing waits for it: the index is None (in-file) then."""
        if self.state == "partial":
            if not self.lock.try_acquire_read():
                yield None
                return
            index = self.index
        else:
            await self._acquire_read()
            index = self.index if self.ready else None
        held = [True]  # False while `released()` has handed it back
        token = _HOLD.set(held)
        try:
            yield index
        finally:
            _HOLD.reset(token)
            self.read_at = time.monotonic()
            if held[0]:
                self.lock.release_read()

    @contextlib.asynccontextmanager
    async def released(self) -> AsyncIterator[None]:
        """Inside `reading()`: hand the read lock back for a while (a model generating, which reads no index) so
        that updates need not wait for it, and hold it again after. The index may have changed in between:
        nothing read from it before may be used after, except through the index itself. A request cancelled
        meanwhile reads nothing more: it does not wait for the lock again (a writer's batch may hold it)."""
        held = _HOLD.get()
        if held is None:  # `reading()` gave no index and holds nothing (a build's batch was being written)
            with FOREGROUND.waiting():
                yield
            return
        self.lock.release_read()
        held[0] = False
        try:
            with FOREGROUND.waiting():  # a save may go on meanwhile (the model needs no interpreter)
                yield
        except asyncio.CancelledError:
            raise
        except BaseException:
            await self._acquire_read()
            held[0] = True
            raise
        await self._acquire_read()
        held[0] = True

    async def _acquire_read(self) -> None:
        """The read lock, at once when free, else waited for off the event loop; cancelled, the thread's lock is
        handed back when got."""
        if self.lock.try_acquire_read():
            return
        acquiring = asyncio.get_running_loop().run_in_executor(None, self.lock.acquire_read)
        try:
            await asyncio.shield(acquiring)
        except asyncio.CancelledError:
            acquiring.add_done_callback(lambda f: None if f.cancelled() or f.exception() else self.lock.release_read())
            raise


# this task's hold of a folder's read lock (a request's, inside `FolderIndex.reading()`)
_HOLD: contextvars.ContextVar[list[bool] | None] = contextvars.ContextVar("repocomp_read_hold", default=None)


class FolderRegistry:
    """The workspace folders by resolved root."""

    def __init__(self) -> None:
        self.folders: dict[Path, FolderIndex] = {}

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
