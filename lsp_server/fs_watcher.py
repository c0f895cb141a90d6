"""The watchdog adapter: file-system events under the workspace folders, as file changes and deletions.

It sees changes made outside the editor (git checkout, codegen): a moved or deleted directory becomes one deletion
per file the index knows under it, an added one a change per file in it. What it reports goes to the change queue,
which filters noise and coalesces.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from lsp_server.folder_index import FolderIndex, FolderRegistry

logger = logging.getLogger(__name__)


class FsWatcher:
    """One watchdog observer (started on the first `watch`) over the folders it is given."""

    def __init__(self, registry: FolderRegistry, *, changed: Callable[[Path], None],
                 deleted: Callable[[Path], None]) -> None:
        self._registry = registry
        self._changed = changed
        self._deleted = deleted
        self._observer: Any = None

    def watch(self, folders: Iterable[FolderIndex] | None = None) -> None:
        """Observe the folders for changes made outside the editor (git checkout, codegen)."""
        from watchdog.events import FileSystemEvent, FileSystemEventHandler
        from watchdog.observers import Observer

        watcher = self

        class _Handler(FileSystemEventHandler):
            def on_any_event(self, event: FileSystemEvent) -> None:
                if event.event_type in ("opened", "closed_no_write"):
                    return
                try:
                    watcher._on_fs_event(event)
                except Exception:  # pragma: no cover - never let the observer thread die
                    logger.exception("file watcher event %r failed", event)

        if self._observer is None:
            self._observer = Observer()
            self._observer.daemon = True
            self._observer.start()
        for folder in folders if folders is not None else self._registry.folders.values():
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
                self._deleted(src)
                self._changed(dest)
        elif event.event_type == "deleted":
            if event.is_directory:
                self._dir_gone(src)
            else:
                self._deleted(src)
        elif not event.is_directory and event.event_type in ("created", "modified", "closed"):
            self._changed(src)

    def _dir_gone(self, directory: Path) -> None:
        folder = self._registry.folder_for(directory)
        if folder is None:
            return
        rel = folder.relative(directory)
        if rel is None:
            return
        prefix = "" if rel == "." else rel + "/"
        for known in list(_index_paths(folder.index)):
            if known.startswith(prefix):
                self._deleted(folder.root / known)

    def _dir_added(self, directory: Path) -> None:
        for path in directory.rglob("*"):
            if path.is_file():
                self._changed(path)

    def stop(self) -> None:
        """Stop the observer (a later `watch` starts a new one)."""
        if self._observer is not None:
            try:
                self._observer.stop()
                self._observer.join(timeout=2)
            except Exception:  # pragma: no cover
                logger.debug("observer stop failed", exc_info=True)
            self._observer = None


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
