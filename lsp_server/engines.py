"""The engines the server completes with: each folder's configuration, the backends and the completers.

- A folder's configuration is its own (repocomp.toml / pyproject.toml) with the client's options applied, then
  resolved once (`repocomp.backends.model_defaults.resolve_config`: "auto", a catalog model's name, the model's prompt
  budget, rounds and token cap made concrete); backends and completers are made from the resolved one.
- One backend per distinct backend configuration, shared by the folders that use it; its model is loaded (and
  warmed up) in the background as soon as it is made, not on the first keystroke.
- Two completers per folder: in-file until its index is ready (`Completer(None, ...)`), then repository-wide.
- `answer` runs one completion request with them, holding the folder's index for reading meanwhile.

Nothing here speaks LSP: what the user should know goes to the `warn(kind, message)` callback.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lsp_server.folder_index import FolderIndex
from lsp_server.options import Options, apply_options
from lsp_server.request import CompletionRequest
from lsp_server.sessions import Sessions
from repocomp.backends import Backend, load_and_warm
from repocomp.config.loading import load_config
from repocomp.config.schema import BackendConfig, Config
from repocomp.errors import RepocompError

if TYPE_CHECKING:
    from repocomp.index import Index
    from repocomp.pipeline import Completer, CompletionResult

logger = logging.getLogger(__name__)

Warn = Callable[[str, str], None]  # (kind, message): one message per kind reaches the user


class Engines:
    """The cache of configurations, backends and completers, by workspace folder (None: files outside any)."""

    def __init__(self, sessions: Sessions, warn: Warn) -> None:
        self._sessions = sessions
        self._warn = warn
        self._options = Options()
        self._folder_configs: dict[Path, Config] = {}  # each folder's own, as read from its files
        self._user_config: Config | None = None  # the user's file alone: files outside any folder, or before it
        self._configs: dict[Path | None, Config] = {}  # with the client's options applied
        self._resolved: dict[Path | None, Config] = {}  # and resolved: what backends and completers are made of
        self._backends: dict[BackendConfig, Backend] = {}
        self._completers: dict[tuple[Path | None, bool], Completer] = {}  # (folder, repository-wide)
        self._loading: set[asyncio.Task[None]] = set()

    # ----- configurations -----

    def set_options(self, options: Options) -> None:
        """The client's options changed: configurations and completers are made anew (backends are kept)."""
        self._options = options
        self._configs.clear()
        self._resolved.clear()
        self._completers.clear()

    def load_folder(self, root: Path) -> Config:
        """Read the folder's own configuration (again; defaults when it is broken, said once) and return it with
        the client's options applied."""
        self._folder_configs[root] = self._read_config(root)
        self._configs.pop(root, None)
        self._resolved.pop(root, None)
        return self.config_for(root)

    def _read_config(self, root: Path | None) -> Config:
        """The user's file overlaid with the folder's own (`root`: none); the defaults when it is broken, said once."""
        try:
            return load_config(root)
        except RepocompError as exc:
            self._warn("config", f"{exc}; using defaults")
            return Config()

    def forget_folder(self, root: Path) -> None:
        """The folder left the workspace: its completers (and the index they hold) are dropped."""
        for repository_wide in (False, True):
            self._completers.pop((root, repository_wide), None)

    def config_for(self, root: Path | None) -> Config:
        """The folder's own config with the client's options applied (option errors said once)."""
        config = self._configs.get(root)
        if config is None:
            base = self._folder_configs.get(root) if root is not None else None
            if base is None:  # the user's settings still hold (a second backend of other settings is a second model)
                if self._user_config is None:
                    self._user_config = self._read_config(None)
                base = self._user_config
            config, errors = apply_options(base, self._options)
            for message in errors:
                self._warn(f"option:{message}", message)
            self._configs[root] = config
        return config

    def resolved(self, root: Path | None) -> Config:
        """`config_for(root)` resolved, once per folder configuration (a RepocompError, such as a catalog model
        that is not prepared, is raised again at each try)."""
        config = self._resolved.get(root)
        if config is None:
            from repocomp.backends.model_defaults import resolve_config

            config = self._resolved[root] = resolve_config(self.config_for(root))
        return config

    # ----- backends and completers -----

    def backend_for(self, config: Config) -> Backend:
        """The backend of a resolved config, made (and its model loaded in the background) on first use."""
        backend = self._backends.get(config.backend)
        if backend is None:
            from repocomp.backends import make_backend

            backend = self._backends[config.backend] = make_backend(config.backend)
            self._load(backend)
        return backend

    def _load(self, backend: Backend) -> None:
        """Load the backend's model now, off the event loop's critical path: not on the first keystroke."""
        loop = _running_loop()
        if loop is not None:
            task = loop.create_task(load_and_warm(backend))
            self._loading.add(task)  # `repocomp/stats` says models are still loading (editor tests wait for it)
            task.add_done_callback(self._loading.discard)
            task.add_done_callback(lambda t: t.cancelled() or t.exception())  # errors show up on first use

    def completer_for(self, folder: FolderIndex | None, index: Index | None) -> Completer:
        """A Completer for the folder: repository-wide once its index is ready, in-file until then."""
        root = folder.root if folder is not None else None
        key = (root, index is not None)
        completer = self._completers.get(key)
        if completer is None:
            from repocomp.pipeline import Completer

            config = self.resolved(root)
            memory = self._sessions.memory(folder.root, config) if folder is not None else None
            # the server puts edited buffers into the index itself, when typing pauses (lsp_server.buffers)
            completer = Completer(index, config, self.backend_for(config), sync_buffers=False, memory=memory)
            self._completers[key] = completer
            self._warm(completer)
        return completer

    def _warm(self, completer: Completer) -> None:
        """Load the completer's token counter (a tokenizer: a moment's work) off the event loop, now."""
        loop = _running_loop()
        if loop is not None:
            fut = loop.run_in_executor(None, getattr, completer, "count_tokens")
            fut.add_done_callback(lambda f: f.cancelled() or f.exception())  # errors show up on first use

    def warm_up(self, folders: list[FolderIndex]) -> None:
        """Build the in-file completer of every folder (and so its tokenizer) before the first request."""
        for folder in folders:
            self.completer_for(folder, None)
        self.completer_for(None, None)

    def index_changed(self, folder: FolderIndex) -> None:
        """The folder's index became ready (or failed): its repository-wide completer is made anew."""
        self._completers.pop((folder.root, True), None)
        if folder.ready:
            self.completer_for(folder, folder.index)

    async def close(self) -> None:
        """Close every backend (a vLLM stream still open is aborted); they are made again on next use."""
        backends, self._backends = list(self._backends.values()), {}
        self._completers.clear()
        for backend in backends:
            try:
                await backend.aclose()
            except Exception:  # pragma: no cover - closing is best effort
                logger.debug("closing backend failed", exc_info=True)

    # ----- one completion -----

    async def answer(self, request: CompletionRequest, deadline: float, prefill: bool = False) -> CompletionResult:
        """The engine's completion by `deadline` (time.monotonic()): repository-wide when the folder's index is
        ready, in-file until then. `prefill`: a prefetch (its prompt computed into the model's cache, nothing
        written)."""
        folder = request.folder
        async with _reading(folder) as index:
            completer = self.completer_for(folder, index)
            from repocomp.pipeline import CompletionOptions  # loaded with the completer above

            options = CompletionOptions(
                mode="repocoder" if index is not None else "infile",
                # the answer ends with the cursor's line: on an empty line (the developer pressed Enter) it is
                # the line being started (in the editing-session replay a multi-line answer there was right as
                # written at 2 of 6 holes, its first line at 5: docs/evaluation.md, "The code after the cursor");
                # inside a line it is the line's rest, decoded in a few tokens (the next line's request reuses the
                # context: keep_lines)
                kind="line",
                # the lock is handed back while the model generates: updates need not wait for it
                generating=folder.released if folder is not None else None,
                cache_key=request.cache_key, deadline=deadline, prefill=prefill)
            return await completer.acomplete_at(request.engine_path(index is not None), request.cut, options)

    # ----- stats -----

    def loading(self) -> int:
        """Backends whose model is still loading."""
        return len(self._loading)

    def prefix_cache_stats(self) -> list[dict[str, Any]]:
        """Prefix reuse of each in-process model: the `prefix_cache` of its backend's `stats()` (requests, hits,
        hit_rate, reused_tokens, prefilled_tokens, entries, tokens) with its `backend`, `model` and `dtype`; the
        backends of one model share its cache, so they are one entry. None for backends without one (vLLM,
        extractive)."""
        out: dict[tuple[str, str, str], dict[str, Any]] = {}
        for backend in list(self._backends.values()):
            stats = backend.stats()
            prefix_cache = stats.get("prefix_cache")
            if prefix_cache is not None:
                key = (backend.name, str(stats.get("model", "")), str(stats.get("dtype", "")))
                out[key] = {"backend": key[0], "model": key[1], "dtype": key[2], **prefix_cache}
        return list(out.values())


@contextlib.asynccontextmanager
async def _reading(folder: FolderIndex | None) -> AsyncIterator[Index | None]:
    """The folder's index held for reading (None while it is not ready); no index outside any folder."""
    if folder is None:
        yield None
        return
    async with folder.reading() as index:
        yield index


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
