"""`$/progress` of each workspace folder's indexing: begun when its build starts, reported a few times a second
from the build thread, ended once the index is ready or failed. A client without work-done progress, or one that
refuses the token, is told nothing; the folder is indexed all the same."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path

from lsprotocol import types
from pygls.lsp.server import LanguageServer

logger = logging.getLogger(__name__)

REPORT_EVERY_S = 0.2  # progress reports are throttled to a few a second


class IndexProgress:
    """One work-done progress token per folder being indexed."""

    def __init__(self, server: LanguageServer, call_on_loop: Callable[..., None]) -> None:
        self._server = server
        self._call_on_loop = call_on_loop  # the build thread reports; the protocol writes from the loop only
        self._tokens: dict[Path, str] = {}
        self._last: dict[Path, float] = {}

    def begin(self, root: Path) -> None:
        """The folder's build starts (on the event loop)."""
        token = self._tokens[root] = f"repocomp-index-{root}"
        caps = self._server.client_capabilities.window
        if caps is None or not caps.work_done_progress:
            self._tokens.pop(root, None)
            return
        begin = types.WorkDoneProgressBegin(title=f"repocomp: indexing {root.name}", percentage=0, cancellable=False)

        async def create() -> None:
            try:
                await self._server.work_done_progress.create_async(token)
            except Exception:  # the client refused: report nothing, index anyway
                logger.debug("work done progress refused", exc_info=True)
                self._tokens.pop(root, None)
                return
            self._server.work_done_progress.begin(token, begin)

        asyncio.ensure_future(create())

    def report(self, root: Path, done: int, total: int, phase: str) -> None:
        """How far the build is (from the build thread)."""
        now = time.monotonic()
        if now - self._last.get(root, 0.0) < REPORT_EVERY_S and done < total:
            return
        self._last[root] = now
        token = self._live(self._tokens.get(root))
        if token is None:
            return
        pct = int(100 * done / total) if total > 0 else None
        report = types.WorkDoneProgressReport(message=f"{phase} {done}/{total}", percentage=pct)
        self._call_on_loop(self._server.work_done_progress.report, token, report)

    def end(self, root: Path, message: str) -> None:
        """The build is over (on the event loop): `message` says how."""
        token = self._live(self._tokens.pop(root, None))
        if token is not None:
            self._server.work_done_progress.end(token, types.WorkDoneProgressEnd(message=message))

    def _live(self, token: str | None) -> str | None:
        """The token if the client accepted it (it is created asynchronously), else None."""
        return token if token is not None and token in self._server.work_done_progress.tokens else None
