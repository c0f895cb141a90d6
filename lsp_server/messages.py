"""What the server tells the user, from any thread: one `window/showMessage` warning per kind of failure, and the
log as `window/logMessage`.

The protocol's writer is not thread-safe: everything is sent from the event loop the session runs on, which
`bind` names once the session is initialized (before that, warnings go to the log only).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from lsprotocol import types
from pygls.lsp.server import LanguageServer

logger = logging.getLogger(__name__)


_HELD_BEFORE_BIND = 64  # messages kept until the session's loop is known (a handful in practice)


class Messages:
    """Warnings said once per kind, log messages, and calls moved onto the event loop."""

    def __init__(self, server: LanguageServer) -> None:
        self._server = server
        self._warned: set[str] = set()
        self.loop: asyncio.AbstractEventLoop | None = None
        self._before_bind: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop the session runs on: messages are sent from it (those that came before, now)."""
        self.loop = loop
        held, self._before_bind = self._before_bind, []
        for fn, args in held:
            self.call_on_loop(fn, *args)

    def call_on_loop(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run `fn(*args)` on the event loop thread (now when already there); before `bind`, held until then (a
        warning said once must not be lost: its kind is not said again)."""
        loop = self.loop
        if loop is None:
            if len(self._before_bind) < _HELD_BEFORE_BIND:
                self._before_bind.append((fn, args))
            return
        if loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            fn(*args)
        else:
            loop.call_soon_threadsafe(fn, *args)

    def warn_once(self, kind: str, message: str) -> None:
        """One window/showMessage warning per failure kind; every occurrence goes to the log."""
        logger.warning("%s: %s", kind, message)
        if kind in self._warned:
            return
        self._warned.add(kind)
        self.call_on_loop(self._server.window_show_message,
                          types.ShowMessageParams(type=types.MessageType.Warning, message=f"repocomp: {message}"))

    def forget_warnings(self) -> None:
        """A new configuration: every kind of failure may be said once again."""
        self._warned.clear()

    def log(self, kind: types.MessageType, message: str) -> None:
        """A window/logMessage (from any thread)."""
        self.call_on_loop(self._server.window_log_message, types.LogMessageParams(type=kind, message=message))


class LspLogHandler(logging.Handler):
    """Forwards log records to the client as window/logMessage (thread-safe; never recursive)."""

    _LEVELS = ((logging.ERROR, types.MessageType.Error), (logging.WARNING, types.MessageType.Warning),
               (logging.INFO, types.MessageType.Info))

    def __init__(self, messages: Messages, level: int = logging.INFO) -> None:
        super().__init__(level)
        self.messages = messages
        self._emitting = False

    def emit(self, record: logging.LogRecord) -> None:
        if self._emitting or self.messages.loop is None:
            return
        self._emitting = True
        try:
            kind = next((t for lvl, t in self._LEVELS if record.levelno >= lvl), types.MessageType.Log)
            self.messages.log(kind, self.format(record))
        except Exception:  # pragma: no cover - logging must never raise
            self.handleError(record)
        finally:
            self._emitting = False
