"""The repocomp language server (pygls 2.x): inline completion and a completion fallback, repository-wide.

One completion, from `textDocument/inlineCompletion` to the model and back:

1. the feature handler (`_completion_features`) calls `RepocompServer.complete`;
2. `complete` builds the `CompletionRequest` once (`lsp_server.request`): the document, its workspace folder and
   the path there, the buffer cut at the cursor; a request with nothing to complete answers empty;
3. `Generations.run` (`lsp_server.generations`) runs at most one generation per document, shared by the requests
   it can serve: a newer request that merely typed into the running generation's completion is served the rest
   of it; any other cancels it and waits as the typing rate says before starting its own; `$/cancelRequest`
   cancels a request (and its generation, unless another request waits for it);
4. `Engines.answer` (`lsp_server.engines`) runs the folder's completer, repository-wide once its index is ready
   and in-file until then, with the folder's resolved configuration and its backend;
5. back in `complete`: the answer is counted (`lsp_server.stats`), what the user should know (a fallback answered,
   the deadline emptied it) is said once (`lsp_server.messages`), the session memory hears what was shown, and
   `lsp_server.convert` turns the text into LSP items.

Any failure (unknown URI, bad position, binary/huge document, non-file URI, backend down or slow, engine error)
answers an empty result and shows at most one `window/showMessage` warning per failure kind.

Around it: `lsp_server.protocol` answers every request, `lsp_server.transport` serves stdio or TCP (started by
`lsp_server.entry`), `lsp_server.workspace_index` keeps each folder's index, `lsp_server.buffers` puts edited
buffers into it when typing pauses, `lsp_server.progress` reports indexing as `$/progress`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.workspace import TextDocument

from lsp_server import convert
from lsp_server.buffers import BufferSyncs
from lsp_server.engines import Engines
from lsp_server.folder_index import FolderIndex
from lsp_server.foreground import FOREGROUND
from lsp_server.generations import Generations, Served, Site
from lsp_server.messages import Messages
from lsp_server.options import Options, parse_options
from lsp_server.prefetch import PREFETCH_METHOD, Prefetcher, edited_line, prefetch_target
from lsp_server.progress import IndexProgress
from lsp_server.protocol import RepocompProtocol
from lsp_server.request import CompletionRequest, DocumentRef, file_of, locate
from lsp_server.sessions import ACCEPT_COMMAND, Sessions, text_edit
from lsp_server.stats import STATS_METHOD, RequestStats, file_rss_bytes, rss_bytes
from lsp_server.summaries import SummaryWriter
from lsp_server.workspace_folders import WorkspaceFolders
from lsp_server.workspace_index import WorkspaceIndexes
from repocomp.errors import BackendError, RepocompError
from repocomp.prompt.cursor import Cut

if TYPE_CHECKING:
    from repocomp.memory.session import SessionMemory
    from repocomp.pipeline import CompletionResult

logger = logging.getLogger(__name__)

SERVER_NAME = "repocomp"

__all__ = ["STATS_METHOD", "RepocompServer", "create_server"]


class RepocompServer(LanguageServer):
    """The session's parts put together, and what the LSP features call. `lsp_server.transport` serves it (not
    pygls' `start_io`/`start_tcp`)."""

    def __init__(self, *, build_index: bool = True, watch_files: bool | None = None) -> None:
        super().__init__(SERVER_NAME, _version(), text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
                         protocol_cls=RepocompProtocol)
        self.protocol: RepocompProtocol
        self.protocol.hooks = self
        self.options = Options()
        self.build_index = build_index
        self.watch_override = watch_files
        self.indexes: WorkspaceIndexes | None = None  # from `initialized` until shutdown
        self.messages = Messages(self)
        self.sessions = Sessions()
        self.summaries = SummaryWriter()
        self.prefetches = Prefetcher()
        self.engines = Engines(self.sessions, self.messages.warn_once)
        self.generations: Generations[CompletionResult] = Generations()
        self.stats = RequestStats()
        self.buffers = BufferSyncs(lambda: self.indexes, self.text_of)
        self.index_progress = IndexProgress(self, self.messages.call_on_loop)
        self.folders = WorkspaceFolders(self)

    # ----- what the protocol asks of the server (lsp_server.protocol.ProtocolHooks) -----

    def max_document_bytes(self) -> int:
        return self.options.server.max_document_bytes

    def warn_once(self, kind: str, message: str) -> None:
        self.messages.warn_once(kind, message)

    def document_changing(self, uri: str, old: str, change: types.TextDocumentContentChangeEvent) -> None:
        """Before the protocol applies `change` to the text `old`: the edit joins the folder's session."""
        doc = DocumentRef.of(uri)
        folder, rel = locate(doc.path, self.indexes)
        self._summarize_when_idle(folder)
        session = self._session(folder, rel)
        if session is None:
            return
        try:
            edit = text_edit(session[1], old, change, self.position_encoding(), time.time())
            if edit is not None:
                self.sessions.changed(session[0], doc.key, edit)
        except Exception:  # noqa: BLE001 - the session misses one edit; the document is still updated
            logger.warning("session memory: an edit of %s was not recorded", uri, exc_info=True)

    def _summarize_when_idle(self, folder: FolderIndex | None) -> None:
        """Activity (an edit, a request): any session summary being written stops, and `folder`'s idle timer
        restarts (lsp_server.summaries)."""
        if folder is None:
            self.summaries.cancel_all()
            return
        root = folder.root
        config = self.engines.config_for(root)
        self.summaries.activity(self.sessions.memory(root, config),
                                lambda: self.engines.backend_for(self.engines.resolved(root)),
                                config.memory.summary_idle_s)

    # ----- configuration -----

    def set_options(self, data: object) -> None:
        self.options, errors = parse_options(data)
        for message in errors:
            self.warn_once(f"option:{message}", message)
        self.engines.set_options(self.options)

    async def reconfigure(self, settings: object) -> None:
        """New client options: what is in flight stops, engines are made anew, warnings may be said again."""
        await self.close_engines()
        self.messages.forget_warnings()
        self.set_options(settings)
        self.warm_up()

    async def pull_configuration(self) -> object:
        """The client's `repocomp` settings (`workspace/configuration`), when it offers them; else None."""
        caps = self.client_capabilities.workspace
        if caps is None or not caps.configuration:
            return None
        result = await self.workspace_configuration_async(
            types.ConfigurationParams(items=[types.ConfigurationItem(section="repocomp")]))
        return result[0] if result else None

    def warm_up(self) -> None:
        self.engines.warm_up(list(self.indexes.folders.values()) if self.indexes is not None else [])

    async def close_engines(self) -> None:
        await self.summaries.close()
        await self.prefetches.close()
        await self.generations.cancel_all()
        await self.engines.close()

    # ----- completion -----

    async def complete(self, uri: str, position: types.Position) -> tuple[str, str]:
        """(completion text, line text at the cursor) for an LSP position; ("", line) on any failure (see the
        module docstring for the steps)."""
        started = time.perf_counter()
        if not self.options.enable:
            return "", ""
        request = self._request(uri, position)
        if request is None:
            return "", ""
        line_text = request.cut.line_text
        self.summaries.cancel_all()  # the model is the request's now
        self.prefetches.cancel()
        # The request's one deadline: the engine answers by it (an earlier round's draft, the fallback's or
        # nothing), whatever the waits for the debounce, the index and the model took of it.
        timeout_s = self._timeout_s(request)
        deadline = time.monotonic() + timeout_s
        try:
            site = Site.of(request.cut, request.index_stamp, request.index_ready)
            served = await self.generations.run(request.key, site,
                                                lambda: self.engines.answer(request, deadline),
                                                lambda: self._version(request.key) != request.version)
        except asyncio.CancelledError:
            self.stats.cancelled += 1
            raise
        except Exception as exc:  # never crash the server on one request
            self.stats.failed += 1
            self._report_failure(exc, uri, position)
            return "", line_text
        finally:
            self._summarize_when_idle(request.folder)
        if served is None:
            self.stats.superseded += 1
            return "", line_text
        self._report_answer(served, request, time.perf_counter() - started, timeout_s)
        text = served.text
        session = self._session(request.folder, request.rel) if text.strip() else None
        if session is not None:
            self.sessions.shown(session[0], request.key, session[1], request.cut.line, text)
        return text, line_text

    def prefetch(self, params: object) -> None:
        """The cursor rests on a line (`repocomp/prefetch`): the context of its end laid and its prompt computed,
        in the background (lsp_server.prefetch). At the line's end, the prompt is the one the request on a line
        opened below extends (inside a line fill-in-the-middle lays it otherwise)."""
        target = prefetch_target(params)
        if target is None:
            self.warn_once("prefetch", f"{PREFETCH_METHOD} wants {{textDocument: {{uri}}, position: {{line, "
                                       "character}}}; ignored")
            return
        self.prefetches.client_sends = True
        self._prefetch_at(*target)

    def edited(self, uri: str, changes: Sequence[types.TextDocumentContentChangeEvent]) -> None:
        """A didChange: where an editor sends no prefetch, the line it ended on is prefetched once the developer
        pauses (lsp_server.prefetch)."""
        line = edited_line(changes)
        if line is not None:
            self.prefetches.after_pause(lambda: self._prefetch_at(uri, line, if_open=True))

    def _prefetch_at(self, uri: str, line: int, if_open: bool = False) -> None:
        """Prefetch the end of `line`; `if_open`: nothing (and nothing said) once the document was closed."""
        if not self.options.enable or (if_open and self.open_document(convert.document_key(uri)) is None):
            return
        request = self._request(uri, types.Position(line=line, character=0))
        if request is None:
            return
        cut = request.cut
        request = dataclasses.replace(request, cut=Cut.from_lines(cut.lines, cut.line, len(cut.line_text)))
        deadline = time.monotonic() + self._timeout_s(request)
        self.prefetches.start(lambda: self.engines.answer(request, deadline, prefill=True))

    def _timeout_s(self, request: CompletionRequest) -> float:
        timeout_ms = self.options.server.request_timeout_ms
        return timeout_ms / 1000 if timeout_ms is not None else self.engines.config_for(request.root).backend.timeout_s

    def _request(self, uri: str, position: types.Position) -> CompletionRequest | None:
        """The request in engine terms; None (said once per kind) when there is nothing to complete."""
        try:
            key = convert.document_key(uri)
            document = self.open_document(key)
            if document is None:
                # a document dropped for its size was reported once already (the "huge" message)
                kind = "huge" if key in self.protocol.oversized else "uri"
                raise convert.ConversionError(kind, f"{uri} is not open in the editor; nothing to complete")
            return CompletionRequest.build(uri, document.source, document.version, position,
                                           self.position_encoding(), self.options.server.max_document_bytes,
                                           self.indexes)
        except convert.ConversionError as exc:
            self.warn_once(exc.kind, str(exc))
            return None

    def _report_failure(self, exc: Exception, uri: str, position: types.Position) -> None:
        """One message per kind of failure; the details go to the log."""
        if isinstance(exc, BackendError):
            self.warn_once("backend", f"backend failed: {exc}")
        elif isinstance(exc, RepocompError):
            self.warn_once("engine", str(exc))
        else:
            logger.error("completion at %s:%d:%d failed", uri, position.line, position.character, exc_info=exc)
            self.warn_once("internal", f"internal error: {type(exc).__name__}: {exc} (see the log)")

    def _report_answer(self, served: Served[CompletionResult], request: CompletionRequest, elapsed_s: float,
                       timeout_s: float) -> None:
        """Stats, and what the user should know about an answer: a fallback answered, or time ran out."""
        result = served.result
        configured = self.engines.resolved(request.root).backend.name  # what "auto" became
        emptied = self.stats.answered(result, served.text, elapsed_s, timeout_s)
        if emptied or (result.fell_back and result.cut_by_time):
            # the model ran out of time, not out of ideas: say so once
            fallback = f" ({result.backend!r} answered)" if result.fell_back else ""
            self.warn_once("deadline", f"no completion within the {timeout_s:g} s deadline{fallback}: the model is "
                                       "slow on this machine or busy (raise [backend] timeout_s)")
        elif result.fell_back:
            self.warn_once("backend-down", f"backend {configured!r} failed; answering with {result.backend!r}")

    # ----- documents -----

    def open_document(self, key: str) -> TextDocument | None:
        """The open document by its key (`convert.document_key`): pygls keys documents by the decoded URI, and
        editors encode one URI differently (a folder with a space arrives as `my%20repo`)."""
        return self.workspace.text_documents.get(key)

    def text_of(self, key: str) -> str | None:
        document = self.open_document(key)
        return document.source if document is not None else None

    def _version(self, key: str) -> int | None:
        document = self.open_document(key)
        return document.version if document is not None else None

    def position_encoding(self) -> str:
        return convert.normalize_encoding(self.workspace.position_encoding)

    def session_of(self, doc: DocumentRef) -> tuple[SessionMemory, str] | None:
        """The session memory of the folder holding the document, and its path there (None: no folder, or
        memory off)."""
        return self._session(*locate(doc.path, self.indexes))

    def _session(self, folder: FolderIndex | None, rel: str | None) -> tuple[SessionMemory, str] | None:
        if folder is None or rel is None:
            return None
        memory = self.sessions.memory(folder.root, self.engines.config_for(folder.root))
        return (memory, rel) if memory is not None else None

    def document_closed(self, doc: DocumentRef) -> None:
        """The session forgets a buffer closed unsaved (its edits are abandoned); the index reads the disk again."""
        self.generations.cancel(doc.key)
        self.sessions.closed(doc.key)
        session = self.session_of(doc)
        if session is not None:
            memory, rel = session
            if _unsaved(doc.path, memory.tracker.text(rel)):
                memory.discarded(rel)
            else:
                memory.closed(rel)
        self.buffers.drop(doc)

    # ----- stats and shutdown -----

    def stats_payload(self) -> dict[str, Any]:
        indexes = self.indexes
        folders = [{"root": str(f.root), "state": f.state, "version": f.version, "saved_version": f.saved_version,
                    "last_save": f.last_save, "last_save_held_ms": f.last_save_held_ms,
                    "last_save_overlap_ms": f.last_save_overlap_ms, "error": f.error,
                    "ids": f.id_counts()}
                   for f in (indexes.folders.values() if indexes is not None else ())]
        return {"completed_ms": list(self.stats.completed_ms), "completed_stages": list(self.stats.completed_stages),
                "superseded": self.stats.superseded,
                "cancelled": self.stats.cancelled, "failed": self.stats.failed,
                "cut_by_time": self.stats.cut_by_time, "retrieval_skipped": self.stats.retrieval_skipped,
                "rss_bytes": rss_bytes(), "file_rss_bytes": file_rss_bytes(), "memory": self.sessions.stats()
                | {"consulted": self.stats.memory_consulted, "skipped": self.stats.memory_skipped,
                   "summaries_pending": self.summaries.busy()}, "prefetches": self.prefetches.stats(),
                "folders": folders, "generations": dataclasses.asdict(self.generations.stats),
                "backends_loading": self.engines.loading(), "prefix_cache": self.engines.prefix_cache_stats(),
                "handlers_running": self.protocol.handlers_running,  # flat over a session (no leaked futures)
                # buffers waiting for a pause plus changes queued or being applied (tests wait for 0)
                "updates_pending": self.buffers.pending() + (indexes.pending() if indexes is not None else 0)}

    async def shutdown_all(self) -> None:
        await self.close_engines()
        await asyncio.get_running_loop().run_in_executor(None, self.sessions.save_all)
        self.buffers.flush()
        if self.indexes is not None:
            indexes, self.indexes = self.indexes, None
            await asyncio.get_running_loop().run_in_executor(None, indexes.close)


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("repocomp")
    except Exception:  # pragma: no cover - running from a source tree without metadata
        return "0"


def _unsaved(path: Path | None, tracked: str | None) -> bool:
    """Whether the text the session tracked for `path` differs from the file on disk (closed without saving)."""
    if path is None or tracked is None:
        return False
    try:
        return path.read_text(encoding="utf-8", errors="replace").rstrip("\n") != tracked.rstrip("\n")
    except OSError:
        return True  # deleted: nothing of it was kept


def create_server(*, build_index: bool = True, watch_files: bool | None = None) -> RepocompServer:
    """A fresh server with every feature registered (no global state: tests and the bench make their own)."""
    server = RepocompServer(build_index=build_index, watch_files=watch_files)
    for register in (_lifecycle_features, _completion_features, _document_features, _workspace_features):
        register(server)
    return server


def _lifecycle_features(server: RepocompServer) -> None:
    @server.feature(types.INITIALIZE)
    def initialize(ls: RepocompServer, params: types.InitializeParams) -> None:
        ls.set_options(params.initialization_options)

    @server.feature(types.INITIALIZED)
    async def initialized(ls: RepocompServer, params: types.InitializedParams) -> None:
        ls.folders.start_indexing()
        ls.warm_up()
        await ls.folders.register_file_watchers()

    @server.feature(types.SHUTDOWN)
    async def shutdown(ls: RepocompServer, params: None) -> None:
        await ls.shutdown_all()

    @server.feature(STATS_METHOD)
    def stats(ls: RepocompServer, params: object) -> dict[str, Any]:
        return ls.stats_payload()


def _completion_features(server: RepocompServer) -> None:
    @server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())
    async def inline_completion(ls: RepocompServer, params: types.InlineCompletionParams) -> types.InlineCompletionList:
        uri = params.text_document.uri
        with FOREGROUND.serving():
            text, _ = await ls.complete(uri, params.position)
            accept = types.Command(title="repocomp: completion accepted", command=ACCEPT_COMMAND,
                                   arguments=[uri, params.position.line, text])
            return convert.to_inline_completion_list(text, params.position, accept)

    @server.feature(PREFETCH_METHOD)
    def prefetch(ls: RepocompServer, params: object) -> None:
        ls.prefetch(params)

    @server.command(ACCEPT_COMMAND)
    def accepted(ls: RepocompServer, uri: str, line: int, text: str) -> None:
        """The editor ran the accepted inline item's command: the session records the completion as taken."""
        doc = DocumentRef.of(uri)
        session = ls.session_of(doc)
        if session is not None:
            ls.sessions.accept(session[0], doc.key, session[1], line, text)

    @server.feature(types.TEXT_DOCUMENT_COMPLETION, types.CompletionOptions(trigger_characters=[".", "(", " ", "\n"]))
    async def completion(ls: RepocompServer, params: types.CompletionParams) -> types.CompletionList:
        with FOREGROUND.serving():
            text, line_text = await ls.complete(params.text_document.uri, params.position)
            return convert.to_completion_list(text, line_text, params.position, ls.position_encoding())


def _document_features(server: RepocompServer) -> None:
    @server.feature(types.TEXT_DOCUMENT_DID_SAVE, types.SaveOptions(include_text=True))
    def did_save(ls: RepocompServer, params: types.DidSaveTextDocumentParams) -> None:
        doc = DocumentRef.of(params.text_document.uri)
        if doc.path is not None and ls.indexes is not None:
            ls.indexes.file_changed(doc.path, params.text if params.text is not None else ls.text_of(doc.key))

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: RepocompServer, params: types.DidOpenTextDocumentParams) -> None:
        doc = DocumentRef.of(params.text_document.uri)
        # a buffer that differs from the file (unsaved edits an editor restored) is an edit: indexed once the editor
        # is quiet, not beside the first keys typed into it
        ls.buffers.schedule(doc)
        session = ls.session_of(doc)
        if session is not None:
            ls.sessions.opened(session[0], session[1], params.text_document.text)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: RepocompServer, params: types.DidChangeTextDocumentParams) -> None:
        doc = DocumentRef.of(params.text_document.uri)
        ls.generations.rate.changed(doc.key, sum(len(change.text) for change in params.content_changes))
        ls.buffers.schedule(doc)  # the protocol applied the changes (and told the session) already
        ls.edited(params.text_document.uri, params.content_changes)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: RepocompServer, params: types.DidCloseTextDocumentParams) -> None:
        ls.document_closed(DocumentRef.of(params.text_document.uri))


def _workspace_features(server: RepocompServer) -> None:
    @server.feature(types.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    def did_change_watched_files(ls: RepocompServer, params: types.DidChangeWatchedFilesParams) -> None:
        for change in params.changes:
            path = file_of(change.uri)
            if path is None or ls.indexes is None:
                continue
            if change.type == types.FileChangeType.Deleted:
                ls.indexes.file_deleted(path)
            else:
                ls.indexes.file_changed(path)

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def did_change_configuration(ls: RepocompServer, params: types.DidChangeConfigurationParams) -> None:
        settings = params.settings if params.settings is not None else await ls.pull_configuration()
        await ls.reconfigure(settings)

    @server.feature(types.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS)
    def did_change_folders(ls: RepocompServer, params: types.DidChangeWorkspaceFoldersParams) -> None:
        if ls.indexes is None:
            return
        for root in filter(None, (file_of(removed.uri) for removed in params.event.removed)):
            ls.folders.remove(root)
        for root in filter(None, (file_of(added.uri) for added in params.event.added)):
            ls.folders.add(root)
