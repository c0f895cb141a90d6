"""Edited buffers reach the index once the editor pauses, in the update worker, off the request path: a request
never waits for its buffer to be re-indexed, it reads the index as of the last pause. A closed buffer's unsaved
edits are gone: the index goes back to the file on disk, at the same pause.

The pause is the editor's, not a document's: a key typed in any document delays every buffer waiting, so that an
update (a closed file read again, the buffer left a moment ago) never lands beside the keys typed in the next one
(a monorepo's update holds the interpreter 20-60 ms)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from lsp_server.request import DocumentRef
from lsp_server.workspace_index import WorkspaceIndexes

SYNC_DELAY_S = 0.3  # how long the editor is quiet before edited buffers are indexed


class BufferSyncs:
    """The documents whose buffers wait for the editor to pause, and one timer that any change restarts."""

    def __init__(self, indexes: Callable[[], WorkspaceIndexes | None], text_of: Callable[[str], str | None]) -> None:
        self._indexes = indexes  # None before the session is initialized and after it shut down
        self._text_of = text_of  # the open document's text by key (None: no longer open)
        self._waiting: dict[str, DocumentRef] = {}
        self._timer: asyncio.TimerHandle | None = None

    def schedule(self, doc: DocumentRef, delay_s: float = SYNC_DELAY_S) -> None:
        """Queue the document's text for the index once the editor has been quiet `delay_s`."""
        if self._indexes() is None or doc.path is None:
            return
        self._waiting[doc.key] = doc
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(delay_s, self._sync)

    def drop(self, doc: DocumentRef) -> None:
        """The document closed: the index goes back to the file on disk once the editor pauses."""
        self.schedule(doc)

    def pending(self) -> int:
        """Buffers waiting for the editor to pause."""
        return len(self._waiting)

    def flush(self) -> None:
        """Queue every waiting buffer now (before the server's indexes close: a closed file's revert included)."""
        if self._timer is not None:
            self._timer.cancel()
        self._sync()

    def _sync(self) -> None:
        self._timer = None
        waiting, self._waiting = self._waiting, {}
        indexes = self._indexes()
        if indexes is None:
            return
        for key, doc in waiting.items():
            assert doc.path is not None  # (schedule keeps none without)
            # a closed document's text is None: the file on disk; the worker skips a text the index already holds
            indexes.file_changed(doc.path, self._text_of(key))
