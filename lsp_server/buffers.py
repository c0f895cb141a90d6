"""Edited buffers reach the index once typing pauses, in the update worker, off the request path: a request never
waits for its buffer to be re-indexed, it reads the index as of the last pause. A closed buffer's unsaved edits
are gone: the index goes back to the file on disk."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from lsp_server.request import DocumentRef
from lsp_server.workspace_index import WorkspaceIndexes

SYNC_DELAY_S = 0.3  # how long the editor is quiet before an edited buffer is indexed


class BufferSyncs:
    """One timer per edited document; a keystroke restarts its wait."""

    def __init__(self, indexes: Callable[[], WorkspaceIndexes | None], text_of: Callable[[str], str | None]) -> None:
        self._indexes = indexes  # None before the session is initialized and after it shut down
        self._text_of = text_of  # the open document's text by key (None: no longer open)
        self._timers: dict[str, asyncio.TimerHandle] = {}

    def schedule(self, doc: DocumentRef, delay_s: float = SYNC_DELAY_S) -> None:
        """Queue the document's text for the index once the editor has been quiet `delay_s`."""
        if self._indexes() is None or doc.path is None:
            return
        self._cancel(doc)
        self._timers[doc.key] = asyncio.get_running_loop().call_later(delay_s, self._sync, doc)

    def drop(self, doc: DocumentRef) -> None:
        """The document closed: the index goes back to the file on disk."""
        self._cancel(doc)
        indexes = self._indexes()
        if doc.path is not None and indexes is not None:
            indexes.file_changed(doc.path)

    def pending(self) -> int:
        """Buffers waiting for typing to pause."""
        return len(self._timers)

    def _cancel(self, doc: DocumentRef) -> None:
        timer = self._timers.pop(doc.key, None)
        if timer is not None:
            timer.cancel()

    def _sync(self, doc: DocumentRef) -> None:
        self._timers.pop(doc.key, None)
        text, indexes = self._text_of(doc.key), self._indexes()
        if text is not None and doc.path is not None and indexes is not None:
            indexes.file_changed(doc.path, text)  # the worker skips a text the index already holds
