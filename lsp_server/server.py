"""The repocomp language server (pygls 2.x): inline completion and a completion fallback, repository-wide.

Handlers are thin: fetch the document, call `RepocompServer.complete` (one engine entry point), convert with
`lsp_server.convert`. `complete` owns the request policy:

- at most one generation per document, shared by the requests it can serve (`lsp_server.generations`): a newer
  request that merely typed into the running generation's completion is served the rest of it; any other
  cancels it (closing the backend stream) and waits as the typing rate says before starting its own;
  `$/cancelRequest` cancels a request (and its generation, unless another request waits for it);
- until a folder's index is ready, completions use in-file context only (`Completer(None, ...)`);
- any failure (unknown URI, bad position, binary/huge document, non-file URI, backend down or slow, engine
  error) answers an empty result and shows at most one `window/showMessage` warning per failure kind.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.workspace import TextDocument

from lsp_server import convert, transport
from lsp_server.generations import Generations, Served, Site
from lsp_server.options import Options, apply_options, parse_options
from lsp_server.protocol import RepocompProtocol
from lsp_server.sessions import ACCEPT_COMMAND, Sessions, text_edit
from lsp_server.workspace_index import FolderIndex, WorkspaceIndexes
from repocomp.backends import Backend, load_and_warm
from repocomp.config import Config, load_config
from repocomp.errors import BackendError, RepocompError

if TYPE_CHECKING:
    from repocomp.index import Index
    from repocomp.memory.session import SessionMemory
    from repocomp.pipeline import Completer, CompletionResult

logger = logging.getLogger(__name__)

SERVER_NAME = "repocomp"
STATS_METHOD = "repocomp/stats"  # custom request: timings, RSS and index state (used by `repocomp bench lsp`)
# An edited buffer reaches the index once typing pauses this long (in the update worker, off the request path):
# a request never waits for its buffer to be re-indexed, it reads the index as of the last pause.
_BUFFER_SYNC_DELAY_S = 0.3
_ANSWER_MARGIN_S = 2.0  # past [backend] timeout_s: the pipeline gives a late backend 0.5 s, then the fallback answers


@dataclasses.dataclass
class RequestStats:
    """Server-side timings of recent completion requests, for `repocomp/stats`."""

    completed_ms: deque[float] = dataclasses.field(default_factory=lambda: deque(maxlen=2000))
    superseded: int = 0
    cancelled: int = 0
    failed: int = 0
    cut_by_time: int = 0  # answers the generation time limit shortened or the deadline emptied
    memory_consulted: int = 0  # requests whose prompt the session memory's controller gave recent edits
    memory_skipped: int = 0  # requests it judged the session unrelated to (or had nothing)


class RepocompServer(LanguageServer):
    """Server state: options, per-folder indexes, engines (completers and backends), in-flight jobs."""

    def __init__(self, *, build_index: bool = True, watch_files: bool | None = None) -> None:
        super().__init__(SERVER_NAME, _version(), text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
                         protocol_cls=RepocompProtocol)
        self.protocol: RepocompProtocol
        self.options = Options()
        self.build_index = build_index
        self.watch_override = watch_files
        self.indexes: WorkspaceIndexes | None = None
        self.generations = Generations()
        self.sessions = Sessions()
        self.stats = RequestStats()
        self._base_configs: dict[Path, Config] = {}
        self._configs: dict[Path | None, Config] = {}
        self._backends: dict[Any, Any] = {}
        self._loading: set[asyncio.Task[Any]] = set()
        self._completers: dict[tuple[Path | None, bool], Any] = {}
        self._warned: set[str] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._progress_tokens: dict[Path, str] = {}
        self._buffer_syncs: dict[str, asyncio.TimerHandle] = {}
        self._progress_last: dict[Path, float] = {}

    # ----- transport (ours, not pygls': see lsp_server.framing and lsp_server.protocol) -----

    def start_io(self, stdin: Any = None, stdout: Any = None) -> int:
        """Serve on stdio until `exit` or the end of input; the exit code (1 for `exit` without `shutdown`)."""
        return transport.serve_stdio(self, stdin, stdout)

    def start_tcp(self, host: str, port: int) -> int:  # type: ignore[override]
        """Serve one TCP client until `exit` or it disconnects; the exit code."""
        return transport.serve_tcp(self, host, port)

    # ----- messages -----

    def warn_once(self, kind: str, message: str) -> None:
        """One window/showMessage warning per failure kind; every occurrence goes to the log."""
        logger.warning("%s: %s", kind, message)
        if kind in self._warned:
            return
        self._warned.add(kind)
        self.call_on_loop(self.window_show_message,
                          types.ShowMessageParams(type=types.MessageType.Warning, message=f"repocomp: {message}"))

    def call_on_loop(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run `fn(*args)` on the event loop thread (the protocol writer is not thread-safe)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            fn(*args)
        else:
            loop.call_soon_threadsafe(fn, *args)

    # ----- configuration -----

    def set_options(self, data: Any) -> None:
        self.options, errors = parse_options(data)
        for message in errors:
            self.warn_once(f"option:{message}", message)
        self._configs.clear()
        self._completers.clear()

    def config_for(self, root: Path | None) -> Config:
        """The folder's own config (repocomp.toml / pyproject.toml) with the client's options applied."""
        key = root
        config = self._configs.get(key)
        if config is None:
            base = self._base_configs.get(key) if key is not None else Config()
            config, errors = apply_options(base or Config(), self.options)
            for message in errors:
                self.warn_once(f"option:{message}", message)
            self._configs[key] = config
        return config

    def base_config(self, root: Path) -> Config:
        try:
            config = load_config(root)
        except RepocompError as exc:
            self.warn_once("config", f"{exc}; using defaults")
            config = Config()
        self._base_configs[root.resolve()] = config
        return config

    # ----- engine -----

    def backend_for(self, config: Config) -> Backend:
        backend = self._backends.get(config.backend)
        if backend is None:
            from repocomp.backends import make_backend

            backend = make_backend(config.backend)
            self._backends[config.backend] = backend
            self._load(backend)
        return backend

    def _load(self, backend: Any) -> None:
        """Load the backend's model now, off the event loop's critical path: not on the first keystroke."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            task = loop.create_task(load_and_warm(backend))
            self._loading.add(task)  # `repocomp/stats` says models are still loading (editor tests wait for it)
            task.add_done_callback(self._loading.discard)
            task.add_done_callback(lambda t: t.cancelled() or t.exception())  # errors show up on first use

    def completer_for(self, folder: FolderIndex | None, index: Index | None) -> Completer:
        """A Completer for the folder: repository-wide once its index is ready, in-file until then."""
        key = (folder.root if folder is not None else None, index is not None)
        completer = self._completers.get(key)
        if completer is None:
            from repocomp.pipeline import Completer

            config = self.config_for(key[0])
            memory = self.sessions.memory(folder.root, config) if folder is not None else None
            completer = Completer(index, config, self.backend_for(config), sync_buffers=False,  # see did_change
                                  memory=memory)
            self._completers[key] = completer
            self._warm(completer)
        return completer

    def _warm(self, completer: Any) -> None:
        """Load the completer's token counter (a tokenizer: a moment's work) off the event loop, now."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            fut = loop.run_in_executor(None, getattr, completer, "count_tokens")
            fut.add_done_callback(lambda f: f.cancelled() or f.exception())  # errors show up on first use

    def warm_up(self) -> None:
        """Build the in-file completer of every folder (and so its tokenizer) before the first request."""
        if self.indexes is not None:
            for folder in self.indexes.folders.values():
                self.completer_for(folder, None)
        self.completer_for(None, None)

    async def close_engines(self) -> None:
        await self.generations.cancel_all()
        backends, self._backends = list(self._backends.values()), {}
        self._completers.clear()
        for backend in backends:
            try:
                await backend.aclose()
            except Exception:  # pragma: no cover - closing is best effort
                logger.debug("closing backend failed", exc_info=True)

    async def complete(self, uri: str, position: types.Position) -> tuple[str, str]:
        """(completion text, line text at the cursor) for an LSP position; ("", line) on any failure.

        The stages: the open document and the cursor in it; the folder and its index; the engine's answer,
        shared with or superseded by other requests of the document (`Generations`); what to tell the user."""
        started = time.perf_counter()
        if not self.options.enable:
            return "", ""
        opened = self._cursor(uri, position)
        if opened is None:
            return "", ""
        document, cursor = opened
        lines = cursor.text.split("\n")
        line_text = lines[cursor.line]
        folder = self.indexes.folder_for(cursor.path) if self.indexes is not None else None
        offset = sum(len(line) + 1 for line in lines[: cursor.line]) + cursor.col
        site = Site(cursor.text[:offset], cursor.text[offset:],
                    (folder.version, folder.ready) if folder is not None else None)
        config = self.config_for(folder.root if folder is not None else None)
        timeout_ms = self.options.server.request_timeout_ms
        # By default a little past the completion's own deadline, so the engine's answer at the deadline (the
        # fallback's, or an earlier round's draft) reaches the editor instead of an empty one.
        timeout_s = timeout_ms / 1000 if timeout_ms is not None else config.backend.timeout_s + _ANSWER_MARGIN_S
        version = document.version
        try:
            served = await self.generations.run(convert.document_key(uri), site,
                                                lambda: self._engine_answer(folder, cursor, timeout_s),
                                                lambda: self._version(uri) != version)
        except asyncio.CancelledError:
            self.stats.cancelled += 1
            raise
        except Exception as exc:  # never crash the server on one request
            self.stats.failed += 1
            self._report_failure(exc, timeout_s, uri, position)
            return "", line_text
        if served is None:
            self.stats.superseded += 1
            return "", line_text
        self._report_answer(served, config, time.perf_counter() - started)
        text = convert.fit_completion(served.text, line_text[: cursor.col])
        session = self.session_of(uri) if text.strip() else None
        if session is not None:
            self.sessions.shown(session[0], convert.document_key(uri), session[1], cursor.line, text)
        return text, line_text

    def _cursor(self, uri: str, position: types.Position) -> tuple[TextDocument, convert.Cursor] | None:
        """The open document and the engine's cursor in it; None (said once per kind) when there is none."""
        try:
            document = self.document(uri)
            if document is None:
                # a document dropped for its size was reported once already (the "huge" message)
                kind = "huge" if convert.document_key(uri) in self.protocol.oversized else "uri"
                raise convert.ConversionError(kind, f"{uri} is not open in the editor; nothing to complete")
            return document, convert.to_cursor(uri, document.source, position, self.position_encoding(),
                                               self.options.server.max_document_bytes)
        except convert.ConversionError as exc:
            self.warn_once(exc.kind, str(exc))
            return None

    async def _engine_answer(self, folder: FolderIndex | None, cursor: convert.Cursor,
                             timeout_s: float) -> CompletionResult:
        """The engine's completion: repository-wide when the folder's index is ready, in-file until then."""
        async with _maybe_reading(folder) as index:
            rel = folder.relative(cursor.path) if folder is not None and index is not None else None
            completer = self.completer_for(folder, index if rel is not None else None)
            path = rel if rel is not None else cursor.path.name
            mode = "repocoder" if index is not None and rel is not None else "infile"
            # the lock is handed back while the model generates: updates need not wait for it
            generating = folder.released if folder is not None else None
            # consecutive prompts of one document share most of their text: a backend may reuse its prefix
            key = f"{folder.root if folder is not None else ''}\0{convert.document_key(cursor.path.as_uri())}"
            return await asyncio.wait_for(completer.acomplete(path, cursor.text, cursor.line, cursor.col, mode=mode,
                                                              generating=generating, cache_key=key), timeout_s)

    def _report_failure(self, exc: Exception, timeout_s: float, uri: str, position: types.Position) -> None:
        """One message per kind of failure; the details go to the log."""
        if isinstance(exc, TimeoutError):
            self.warn_once("backend-slow", f"no completion within {timeout_s:g} s; the backend is slow or stuck")
        elif isinstance(exc, BackendError):
            self.warn_once("backend", f"backend failed: {exc}")
        elif isinstance(exc, RepocompError):
            self.warn_once("engine", str(exc))
        else:
            logger.error("completion at %s:%d:%d failed", uri, position.line, position.character, exc_info=exc)
            self.warn_once("internal", f"internal error: {type(exc).__name__}: {exc} (see the log)")

    def _report_answer(self, served: Served, config: Config, elapsed_s: float) -> None:
        """Stats, and what the user should know about an answer: a fallback answered, or time ran out."""
        result: CompletionResult = served.result
        backend_config = config.backend
        # the backend object's name: what "auto" resolved to when it was built (no model lookup per request)
        configured = self.backend_for(config).name
        if result.backend not in (configured, "") and configured != "extractive":
            self.warn_once("backend-down", f"backend {configured!r} failed; answering with {result.backend!r}")
        if result.memory is not None:
            if result.memory.consulted:
                self.stats.memory_consulted += 1
            else:
                self.stats.memory_skipped += 1
        emptied = not served.text.strip() and elapsed_s >= backend_config.timeout_s
        if result.cut_by_time or emptied:
            self.stats.cut_by_time += 1
        if emptied:  # the model ran out of time, not out of ideas: say so once
            self.warn_once("deadline", f"no completion within the {backend_config.timeout_s:g} s deadline: the "
                                       "model is slow on this machine or busy (raise [backend] timeout_s)")
        self.stats.completed_ms.append(elapsed_s * 1000)

    def schedule_buffer_sync(self, uri: str, delay_s: float = _BUFFER_SYNC_DELAY_S) -> None:
        """Queue the document's text for the index once the editor has been quiet `delay_s` (a keystroke
        restarts the wait)."""
        if self.indexes is None or self._loop is None or _path_of(uri) is None:
            return
        self._cancel_buffer_sync(uri)
        self._buffer_syncs[convert.document_key(uri)] = self._loop.call_later(delay_s, self._sync_buffer, uri)

    def _cancel_buffer_sync(self, uri: str) -> None:
        pending = self._buffer_syncs.pop(convert.document_key(uri), None)
        if pending is not None:
            pending.cancel()

    def _sync_buffer(self, uri: str) -> None:
        self._buffer_syncs.pop(convert.document_key(uri), None)
        document = self.document(uri)
        path = _path_of(uri)
        if document is not None and path is not None and self.indexes is not None:
            self.indexes.file_changed(path, document.source)  # the worker skips a text the index already holds

    def drop_buffer(self, uri: str) -> None:
        """A closed document's unsaved edits are gone: the index goes back to the file on disk."""
        self._cancel_buffer_sync(uri)
        path = _path_of(uri)
        if path is not None and self.indexes is not None:
            self.indexes.file_changed(path)

    def document(self, uri: str) -> TextDocument | None:
        """The open document of `uri` however the editor encoded it: pygls keys documents by the decoded URI
        (a folder with a space arrives as `my%20repo`)."""
        return self.workspace.text_documents.get(convert.document_key(uri))

    def session_of(self, uri: str) -> tuple[SessionMemory, str] | None:
        """The session memory of the folder holding `uri`, and the document's path in it (None: no folder, or
        memory off)."""
        path = _path_of(uri)
        folder = self.indexes.folder_for(path) if self.indexes is not None and path is not None else None
        if folder is None:
            return None
        assert path is not None  # a folder was found for it
        rel = folder.relative(path)
        memory = self.sessions.memory(folder.root, self.config_for(folder.root)) if rel is not None else None
        return (memory, rel) if memory is not None and rel is not None else None

    def document_changing(self, uri: str, old: str, change: types.TextDocumentContentChangeEvent) -> None:
        """Before the protocol applies `change` to the text `old`: the edit joins the folder's session."""
        session = self.session_of(uri)
        if session is None:
            return
        try:
            edit = text_edit(session[1], old, change, self.position_encoding(), time.time())
            if edit is not None:
                self.sessions.changed(session[0], convert.document_key(uri), edit)
        except Exception:  # noqa: BLE001 - the session misses one edit; the document is still updated
            logger.warning("session memory: an edit of %s was not recorded", uri, exc_info=True)

    def _version(self, uri: str) -> int | None:
        document = self.document(uri)
        return document.version if document is not None else None

    def position_encoding(self) -> str:
        return convert.normalize_encoding(self.workspace.position_encoding)

    # ----- indexing -----

    def start_indexing(self) -> None:
        """Register every workspace folder, start their builds and the file watcher (never blocks)."""
        self._loop = asyncio.get_running_loop()
        debounce = self.options.server.debounce_ms / 1000
        self.indexes = WorkspaceIndexes(on_progress=self._on_index_progress, on_state=self._on_index_state,
                                        debounce_s=debounce)
        for root in self.folder_roots():
            self.add_folder(root)

    def add_folder(self, root: Path) -> None:
        assert self.indexes is not None
        root = root.resolve()
        if not root.is_dir():
            self.warn_once("folder", f"workspace folder {root} does not exist; completing in-file only there")
            return
        self.base_config(root)
        self._configs.pop(root, None)
        folder = self.indexes.add_folder(root, self.config_for(root))
        if self.build_index:
            self._begin_progress(folder)
            self.indexes.start(folder)
        watch = self.options.server.watch_files if self.watch_override is None else self.watch_override
        if watch:
            self.indexes.watch([folder])

    def folder_roots(self) -> list[Path]:
        roots: list[Path] = []
        for folder in self.workspace.folders.values():
            try:
                roots.append(convert.uri_to_path(folder.uri))
            except convert.ConversionError as exc:
                self.warn_once("scheme", str(exc))
        if not roots and self.workspace.root_uri:
            try:
                roots.append(convert.uri_to_path(self.workspace.root_uri))
            except convert.ConversionError as exc:
                self.warn_once("scheme", str(exc))
        return roots

    def _begin_progress(self, folder: FolderIndex) -> None:
        token = f"repocomp-index-{folder.root}"
        self._progress_tokens[folder.root] = token
        title = f"repocomp: indexing {folder.root.name}"
        caps = self.client_capabilities.window
        if caps is not None and caps.work_done_progress:
            async def begin() -> None:
                try:
                    await self.work_done_progress.create_async(token)
                except Exception:  # the client refused: report nothing, index anyway
                    logger.debug("work done progress refused", exc_info=True)
                    self._progress_tokens.pop(folder.root, None)
                    return
                self.work_done_progress.begin(token, types.WorkDoneProgressBegin(title=title, percentage=0,
                                                                                 cancellable=False))
            asyncio.ensure_future(begin())
        else:
            self._progress_tokens.pop(folder.root, None)

    def _on_index_progress(self, folder: FolderIndex, done: int, total: int, phase: str) -> None:
        now = time.monotonic()  # called from the build thread; throttle to a few reports a second
        if now - self._progress_last.get(folder.root, 0.0) < 0.2 and done < total:
            return
        self._progress_last[folder.root] = now
        token = self._progress_tokens.get(folder.root)
        if token is None or token not in self.work_done_progress.tokens:
            return
        pct = int(100 * done / total) if total > 0 else None
        report = types.WorkDoneProgressReport(message=f"{phase} {done}/{total}", percentage=pct)
        self.call_on_loop(self.work_done_progress.report, token, report)

    def _on_index_state(self, folder: FolderIndex) -> None:
        def done() -> None:
            self._completers.pop((folder.root, True), None)
            if folder.ready:
                self.completer_for(folder, folder.index)
            token = self._progress_tokens.pop(folder.root, None)
            if folder.state == "ready":
                message = "index ready"
                self.window_log_message(types.LogMessageParams(type=types.MessageType.Info,
                                                               message=f"repocomp: index of {folder.root} ready"))
                for notice in folder.notices:  # e.g. a stored index that was not the folder's own, set aside
                    self.warn_once(f"index:{notice}", notice)
            else:
                message = f"indexing failed: {folder.error}"
                self.warn_once("index", f"indexing {folder.root} failed ({folder.error}); completing in-file only")
            if token is not None and token in self.work_done_progress.tokens:
                self.work_done_progress.end(token, types.WorkDoneProgressEnd(message=message))

        self.call_on_loop(done)

    async def register_file_watchers(self) -> None:
        caps = self.client_capabilities.workspace
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
            await self.client_register_capability_async(types.RegistrationParams(registrations=[registration]))
        except Exception:
            logger.info("client refused the file watcher registration; relying on the server's own watcher")

    def stats_payload(self) -> dict[str, Any]:
        folders = []
        if self.indexes is not None:
            folders = [{"root": str(f.root), "state": f.state, "version": f.version, "error": f.error,
                        "ids": f.id_counts()} for f in self.indexes.folders.values()]
        return {"completed_ms": list(self.stats.completed_ms), "superseded": self.stats.superseded,
                "cancelled": self.stats.cancelled, "failed": self.stats.failed,
                "cut_by_time": self.stats.cut_by_time, "rss_bytes": rss_bytes(), "memory": self.sessions.stats()
                | {"consulted": self.stats.memory_consulted, "skipped": self.stats.memory_skipped},
                "folders": folders, "generations": dataclasses.asdict(self.generations.stats),
                "backends_loading": len(self._loading), "prefix_cache": self.prefix_cache_stats(),
                "handlers_running": len(self.protocol._request_futures),  # flat over a session (no leaked futures)
                # buffers waiting for a pause plus changes queued or being applied (tests wait for 0)
                "updates_pending": len(self._buffer_syncs) + (self.indexes.pending() if self.indexes else 0)}

    def prefix_cache_stats(self) -> list[dict[str, Any]]:
        """Prefix reuse of each in-process model: its backend's `cache_stats()` (requests, hits, hit_rate,
        reused_tokens, prefilled_tokens, entries, tokens) with its `backend`, `model` and `dtype`; the backends of
        one model share its cache, so they are one entry. None for backends without one (vLLM, extractive)."""
        out: dict[tuple[str, str, str], dict[str, Any]] = {}
        for backend in list(self._backends.values()):
            inner = getattr(backend, "primary", backend)
            cache_stats = getattr(inner, "cache_stats", None)
            if callable(cache_stats):
                key = (inner.name, str(getattr(inner, "model_name", "")), str(getattr(inner, "dtype", "")))
                out[key] = {"backend": key[0], "model": key[1], "dtype": key[2], **cache_stats()}
        return list(out.values())

    async def shutdown_all(self) -> None:
        await self.close_engines()
        await asyncio.get_running_loop().run_in_executor(None, self.sessions.save_all)
        if self.indexes is not None:
            indexes, self.indexes = self.indexes, None
            await asyncio.get_running_loop().run_in_executor(None, indexes.close)


class _NoFolder:
    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


def _maybe_reading(folder: FolderIndex | None) -> Any:
    return folder.reading() if folder is not None else _NoFolder()


def rss_bytes() -> int:
    """Resident set size of this process (Linux /proc; 0 elsewhere)."""
    try:
        with open(f"/proc/{os.getpid()}/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("repocomp")
    except Exception:  # pragma: no cover - running from a source tree without metadata
        return "0"


def _unsaved(uri: str, tracked: str | None) -> bool:
    """Whether the text the session tracked for `uri` differs from the file on disk (closed without saving)."""
    path = _path_of(uri)
    if path is None or tracked is None:
        return False
    try:
        return path.read_text(encoding="utf-8", errors="replace").rstrip("\n") != tracked.rstrip("\n")
    except OSError:
        return True  # deleted: nothing of it was kept


def _path_of(uri: str) -> Path | None:
    try:
        return convert.uri_to_path(uri)
    except convert.ConversionError:
        return None


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
        ls.start_indexing()
        ls.warm_up()
        await ls.register_file_watchers()

    @server.feature(types.SHUTDOWN)
    async def shutdown(ls: RepocompServer, params: None) -> None:
        await ls.shutdown_all()

    @server.feature(STATS_METHOD)
    def stats(ls: RepocompServer, params: Any) -> dict[str, Any]:
        return ls.stats_payload()


def _completion_features(server: RepocompServer) -> None:
    @server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())
    async def inline_completion(ls: RepocompServer, params: types.InlineCompletionParams) -> types.InlineCompletionList:
        uri = params.text_document.uri
        text, _ = await ls.complete(uri, params.position)
        accept = types.Command(title="repocomp: completion accepted", command=ACCEPT_COMMAND,
                               arguments=[uri, params.position.line, text])
        return convert.to_inline_completion_list(text, params.position, accept)

    @server.command(ACCEPT_COMMAND)
    def accepted(ls: RepocompServer, uri: str, line: int, text: str) -> None:
        """The editor ran the accepted inline item's command: the session records the completion as taken."""
        session = ls.session_of(uri)
        if session is not None:
            ls.sessions.accept(session[0], convert.document_key(uri), session[1], line, text)

    @server.feature(types.TEXT_DOCUMENT_COMPLETION, types.CompletionOptions(trigger_characters=[".", "(", " ", "\n"]))
    async def completion(ls: RepocompServer, params: types.CompletionParams) -> types.CompletionList:
        text, line_text = await ls.complete(params.text_document.uri, params.position)
        return convert.to_completion_list(text, line_text, params.position, ls.position_encoding())


def _document_features(server: RepocompServer) -> None:
    @server.feature(types.TEXT_DOCUMENT_DID_SAVE, types.SaveOptions(include_text=True))
    def did_save(ls: RepocompServer, params: types.DidSaveTextDocumentParams) -> None:
        path = _path_of(params.text_document.uri)
        if path is None or ls.indexes is None:
            return
        document = ls.document(params.text_document.uri)
        text = params.text if params.text is not None else (document.source if document is not None else None)
        ls.indexes.file_changed(path, text)

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: RepocompServer, params: types.DidOpenTextDocumentParams) -> None:
        ls.schedule_buffer_sync(params.text_document.uri, 0.0)  # unsaved edits of an editor restored at start
        session = ls.session_of(params.text_document.uri)
        if session is not None:
            ls.sessions.opened(session[0], session[1], params.text_document.text)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: RepocompServer, params: types.DidChangeTextDocumentParams) -> None:
        typed = sum(len(change.text) for change in params.content_changes)  # the protocol applied them
        ls.generations.rate.changed(convert.document_key(params.text_document.uri), typed)
        ls.schedule_buffer_sync(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: RepocompServer, params: types.DidCloseTextDocumentParams) -> None:
        ls.generations.cancel(convert.document_key(params.text_document.uri))
        ls.sessions.closed(convert.document_key(params.text_document.uri))
        session = ls.session_of(params.text_document.uri)
        if session is not None:  # a buffer closed unsaved: its edits are abandoned, the session forgets them
            memory, rel = session
            if _unsaved(params.text_document.uri, memory.tracker.text(rel)):
                memory.discarded(rel)
            else:
                memory.closed(rel)
        ls.drop_buffer(params.text_document.uri)


def _workspace_features(server: RepocompServer) -> None:
    @server.feature(types.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    def did_change_watched_files(ls: RepocompServer, params: types.DidChangeWatchedFilesParams) -> None:
        if ls.indexes is None:
            return
        for change in params.changes:
            path = _path_of(change.uri)
            if path is None:
                continue
            if change.type == types.FileChangeType.Deleted:
                ls.indexes.file_deleted(path)
            else:
                ls.indexes.file_changed(path)

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def did_change_configuration(ls: RepocompServer, params: types.DidChangeConfigurationParams) -> None:
        settings = params.settings
        if settings is None:
            caps = ls.client_capabilities.workspace
            if caps is not None and caps.configuration:
                result = await ls.workspace_configuration_async(
                    types.ConfigurationParams(items=[types.ConfigurationItem(section="repocomp")]))
                settings = result[0] if result else None
        await ls.close_engines()
        ls._warned.clear()
        ls.set_options(settings)
        ls.warm_up()

    @server.feature(types.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS)
    def did_change_folders(ls: RepocompServer, params: types.DidChangeWorkspaceFoldersParams) -> None:
        if ls.indexes is None:
            return
        for removed in params.event.removed:
            path = _path_of(removed.uri)
            if path is not None:
                ls.indexes.remove_folder(path)
        for added in params.event.added:
            path = _path_of(added.uri)
            if path is not None:
                ls.add_folder(path)


class LspLogHandler(logging.Handler):
    """Forwards log records to the client as window/logMessage (thread-safe; never recursive)."""

    _LEVELS = ((logging.ERROR, types.MessageType.Error), (logging.WARNING, types.MessageType.Warning),
               (logging.INFO, types.MessageType.Info))

    def __init__(self, server: RepocompServer, level: int = logging.INFO) -> None:
        super().__init__(level)
        self.server = server
        self._emitting = False

    def emit(self, record: logging.LogRecord) -> None:
        if self._emitting or self.server._loop is None:
            return
        self._emitting = True
        try:
            kind = next((t for lvl, t in self._LEVELS if record.levelno >= lvl), types.MessageType.Log)
            params = types.LogMessageParams(type=kind, message=self.format(record))
            self.server.call_on_loop(self.server.window_log_message, params)
        except Exception:  # pragma: no cover - logging must never raise
            self.handleError(record)
        finally:
            self._emitting = False
