"""One repocomp index per workspace folder: built in the background, kept current file by file.

`WorkspaceIndexes` is the facade the server uses; it composes one part per job:
- `lsp_server.folder_index`: the folders (`add_folder`, `remove_folder`, `folder_for`), each a `FolderIndex`
  whose index readers (completions) and the writer (the change worker) share under a reader-writer lock;
- `lsp_server.index_builder`: `start` builds (or loads, then brings up to date with the disk) a folder's index
  in a daemon thread, reporting progress through a callback (the server turns it into `$/progress`);
- `lsp_server.change_worker`: `file_changed` / `file_deleted` (from didSave, workspace/didChangeWatchedFiles, or
  the watcher) queue a change; one worker thread coalesces a burst into one batch of `Index.update_files` calls
  applied in chunks so completions interleave, refreshes stale relation rows between changes and saves a
  changed index once its folder is quiet;
- `lsp_server.fs_watcher`: `watch` feeds changes made outside the editor (watchdog) into that queue.

Nothing here knows about LSP.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from pathlib import Path

from lsp_server.change_worker import SAVE_AFTER_S, ChangeWorker
from lsp_server.folder_index import FolderIndex, FolderRegistry, RWLock, StateCallback
from lsp_server.fs_watcher import FsWatcher
from lsp_server.index_builder import IndexBuilder, ProgressCallback
from repocomp.config.schema import Config

__all__ = ["FolderIndex", "ProgressCallback", "RWLock", "StateCallback", "WorkspaceIndexes"]


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
        save_after_s: float = SAVE_AFTER_S,
    ) -> None:
        self._registry = FolderRegistry()
        self._builder = IndexBuilder(replay=self.file_changed, on_progress=on_progress, on_state=on_state)
        self._changes = ChangeWorker(self._registry, on_batch=on_batch, debounce_s=debounce_s,
                                     max_delay_s=max_delay_s, save_after_s=save_after_s)
        self._watcher = FsWatcher(self._registry, changed=self.file_changed, deleted=self.file_deleted)

    @property
    def folders(self) -> dict[Path, FolderIndex]:
        return self._registry.folders

    def add_folder(self, root: Path, config: Config) -> FolderIndex:
        return self._registry.add_folder(root, config)

    def remove_folder(self, root: Path) -> None:
        self._registry.remove_folder(root)

    def folder_for(self, path: Path) -> FolderIndex | None:
        """The innermost folder containing `path`."""
        return self._registry.folder_for(path)

    def start(self, folder: FolderIndex) -> threading.Thread:
        """Build or load `folder`'s index in a daemon thread; never blocks the caller."""
        return self._builder.start(folder)

    def is_noise(self, path: Path, folder: FolderIndex | None = None) -> bool:
        """Paths never worth indexing: VCS and cache directories, the index directory itself."""
        return self._changes.is_noise(path, folder)

    def file_changed(self, path: Path, text: str | None = None) -> None:
        """Queue an update of `path` (with its saved `text`, or None to read the disk)."""
        self._changes.file_changed(path, text)

    def file_deleted(self, path: Path) -> None:
        self._changes.file_deleted(path)

    def pending(self) -> int:
        """Changes queued or being applied."""
        return self._changes.pending()

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Block until every queued change is applied (tests and the benchmark)."""
        return self._changes.wait_idle(timeout)

    def watch(self, folders: Iterable[FolderIndex] | None = None) -> None:
        """Observe the folders for changes made outside the editor (git checkout, codegen)."""
        self._watcher.watch(folders)

    def close(self) -> None:
        """Stop the observer and the worker (queued changes are dropped); save indexes whose files changed."""
        self._watcher.stop()
        self._changes.close()
