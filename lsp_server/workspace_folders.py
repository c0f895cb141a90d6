"""The workspace's folders as the editor names them: each registered, its index built or loaded and watched, the
user told when it is ready (or what it left out, or that it failed); folders added and removed as the workspace
changes; the editor asked to report file changes."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from lsprotocol import types

from lsp_server import convert
from lsp_server.folder_index import FolderIndex
from lsp_server.workspace_index import WorkspaceIndexes
from repocomp.index.walk import partial_index

if TYPE_CHECKING:
    from pygls.workspace import Workspace

    from lsp_server.engines import Engines
    from lsp_server.messages import Messages
    from lsp_server.options import Options
    from lsp_server.progress import IndexProgress

logger = logging.getLogger(__name__)


class FolderHost(Protocol):
    """The parts of the server the folders use (`lsp_server.server.RepocompServer`)."""

    indexes: WorkspaceIndexes | None
    options: Options
    build_index: bool
    watch_override: bool | None
    engines: Engines
    messages: Messages
    index_progress: IndexProgress

    @property
    def workspace(self) -> Workspace: ...

    @property
    def client_capabilities(self) -> types.ClientCapabilities: ...

    def warn_once(self, kind: str, message: str) -> None: ...

    async def client_register_capability_async(self, params: types.RegistrationParams) -> Any: ...


class WorkspaceFolders:
    """The server's workspace folders and their indexes (the server holds the parts they report to)."""

    def __init__(self, server: FolderHost) -> None:
        self.server = server

    def start_indexing(self) -> None:
        """Register every workspace folder, start their builds and the file watcher (never blocks)."""
        self.server.messages.bind(asyncio.get_running_loop())
        self.server.indexes = WorkspaceIndexes(
            on_progress=lambda folder, *progress: self.server.index_progress.report(folder.root, *progress),
            on_state=self._on_index_state, debounce_s=self.server.options.server.debounce_ms / 1000,
            save_after_s=self.server.options.server.save_after_ms / 1000)
        for root in self.roots():
            self.add(root)

    def add(self, root: Path) -> None:
        assert self.server.indexes is not None
        root = root.resolve()
        if not root.is_dir():
            self.server.warn_once("folder", f"workspace folder {root} does not exist; completing in-file only there")
            return
        folder = self.server.indexes.add_folder(root, self.server.engines.load_folder(root))
        if self.server.build_index:
            self.server.index_progress.begin(folder.root)
            self.server.indexes.start(folder)
        watch = self.server.options.server.watch_files if self.server.watch_override is None else self.server.watch_override
        if watch:
            self.server.indexes.watch([folder])

    def remove(self, root: Path) -> None:
        """The folder left the workspace: its files complete in-file only, its engines let go of its index."""
        assert self.server.indexes is not None
        self.server.indexes.remove_folder(root)
        self.server.engines.forget_folder(root.resolve())

    def roots(self) -> list[Path]:
        roots = self._local_paths([folder.uri for folder in self.server.workspace.folders.values()])
        if not roots and self.server.workspace.root_uri:
            roots = self._local_paths([self.server.workspace.root_uri])
        return roots

    def _local_paths(self, uris: list[str]) -> list[Path]:
        roots: list[Path] = []
        for uri in uris:
            try:
                roots.append(convert.uri_to_path(uri))
            except convert.ConversionError as exc:
                self.server.warn_once("scheme", str(exc))
        return roots

    def _on_index_state(self, folder: FolderIndex) -> None:
        """A folder's index became ready or failed (called from its build thread)."""

        def done() -> None:
            if self.server.indexes is not None and self.server.indexes.folders.get(folder.root) is folder:  # not removed since
                self.server.engines.index_changed(folder)
            if folder.state == "ready":
                partial = partial_index(folder.notices) is not None
                message = "index ready, part of the folder left out" if partial else "index ready"
                self.server.messages.log(types.MessageType.Info, f"repocomp: index of {folder.root} ready")
                for notice in folder.notices:  # e.g. a stored index that was not the folder's own, set aside
                    self.server.warn_once(f"index:{notice}", notice)
            else:
                message = f"indexing failed: {folder.error}"
                self.server.warn_once("index", f"indexing {folder.root} failed ({folder.error}); completing in-file only")
            self.server.index_progress.end(folder.root, message)

        self.server.messages.call_on_loop(done)

    async def register_file_watchers(self) -> None:
        caps = self.server.client_capabilities.workspace
        watched = caps.did_change_watched_files if caps is not None else None
        if watched is None or not watched.dynamic_registration:
            return
        registration = types.Registration(
            id="repocomp-watched-files",
            method=types.WORKSPACE_DID_CHANGE_WATCHED_FILES,
            register_options=types.DidChangeWatchedFilesRegistrationOptions(
                watchers=[types.FileSystemWatcher(glob_pattern="**/*")]),
        )
        try:
            await self.server.client_register_capability_async(types.RegistrationParams(registrations=[registration]))
        except Exception:
            logger.info("client refused the file watcher registration; relying on the server's own watcher")
