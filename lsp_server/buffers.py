"""Edited buffers reach the index once the editor pauses, in the update worker, off the request path: a request
never waits for its buffer to be re-indexed, it reads the index as of the last pause. A closed buffer's unsaved
edits are gone: the index goes back to the file on disk once the editor rests a while longer.

The pause is the editor's, not a document's: a key typed in any document delays every buffer waiting, so that an
update never lands beside the keys typed in the next one (a monorepo's update holds the interpreter 20-60 ms). A
closed file waits longer than an edited one: the buffer being typed in is what the next requests read, the one
left a moment ago rarely (its update landed beside the first keys after each short pause)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from lsp_server.request import DocumentRef
from lsp_server.workspace_index import WorkspaceIndexes

SYNC_DELAY_S = 0.3  # how long the editor is quiet before edited buffers are indexed
REVERT_DELAY_S = 1.0  # ... before a buffer closed unsaved gives the index back the file on disk


class BufferSyncs:
    """The documents whose buffers wait for the editor to pause, and one timer that any change restarts."""

    def __init__(self, indexes: Callable[[], WorkspaceIndexes | None], text_of: Callable[[str], str | None],
                 delay_s: float = SYNC_DELAY_S, revert_delay_s: float = REVERT_DELAY_S) -> None:
        self._indexes = indexes  # None before the session is initialized and after it shut down
        self._text_of = text_of  # the open document's text by key (None: no longer open)
        self._delay_s, self._revert_delay_s = delay_s, max(delay_s, revert_delay_s)
        self._waiting: dict[str, DocumentRef] = {}
        self._changed_at = 0.0  # the event loop's time of the last change
        self._timer: asyncio.TimerHandle | None = None

    def schedule(self, doc: DocumentRef) -> None:
        """Queue the document's buffer (its file, once closed) for the index once the editor is quiet."""
        if self._indexes() is None or doc.path is None:
            return
        self._waiting[doc.key] = doc
        loop = asyncio.get_running_loop()
        self._changed_at = loop.time()
        self._arm(loop, self._delay_s)

    def drop(self, doc: DocumentRef) -> None:
        """The document closed: the index goes back to the file on disk once the editor rests."""
        self.schedule(doc)

    def pending(self) -> int:
        """Buffers waiting for the editor to pause."""
        return len(self._waiting)

    def flush(self) -> None:
        """Queue every waiting buffer now (before the server's indexes close: a closed file's revert included)."""
        if self._timer is not None:
            self._timer.cancel()
        self._sync(everything=True)

    def _arm(self, loop: asyncio.AbstractEventLoop, delay_s: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_later(delay_s, self._sync)

    def _sync(self, everything: bool = False) -> None:
        self._timer = None
        indexes = self._indexes()
        if indexes is None:
            self._waiting.clear()
            return
        quiet_s = asyncio.get_running_loop().time() - self._changed_at if not everything else float("inf")
        for key, doc in list(self._waiting.items()):
            text = self._text_of(key)  # None: closed; the worker skips a text the index already holds
            if text is not None or quiet_s >= self._revert_delay_s:
                del self._waiting[key]
                assert doc.path is not None  # (schedule keeps none without)
                indexes.file_changed(doc.path, text)
        if self._waiting:  # closed files, waiting for the longer rest
            self._arm(asyncio.get_running_loop(), self._revert_delay_s - quiet_s)
