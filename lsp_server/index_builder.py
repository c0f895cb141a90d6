"""The build thread: builds or loads a folder's index off the caller's thread, then makes it the folder's index.

A stored index loaded at start-up is first brought up to date with the disk (files changed while no server ran);
one that cannot be (an update of it fails) is rebuilt from the disk instead, said once, never a failed folder;
progress goes to a callback (the server turns it into `$/progress`), and changes that raced the build are replayed
from disk once the index is ready. A large folder is built in batches (repocomp.index): from the first batch on,
completions read the part indexed (state "partial"; in-file while a batch is being added, never waiting for it).
Before it is ready, the index's numba kernels are made ready too (`warm_kernels`); once it is, what a loaded
index's first edit and completion need (its table of texts by hash, the graph's cost matrix) is made beside the
requests.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lsp_server.folder_index import FolderIndex, StateCallback
from repocomp.index import heap

logger = logging.getLogger(__name__)

ProgressCallback = Callable[[FolderIndex, int, int, str], None]


class IndexBuilder:
    """Starts one daemon thread per folder build; `replay` queues a change seen while the folder was building."""

    def __init__(self, *, replay: Callable[[Path], None], on_progress: ProgressCallback | None = None,
                 on_state: StateCallback | None = None) -> None:
        self._replay = replay
        self._on_progress = on_progress
        self._on_state = on_state

    def start(self, folder: FolderIndex) -> threading.Thread:
        """Build or load `folder`'s index in a daemon thread; never blocks the caller."""
        folder.state = "building"
        thread = threading.Thread(target=self._build, args=(folder,), name=f"repocomp-index:{folder.root.name}",
                                  daemon=True)
        thread.start()
        return thread

    def _build(self, folder: FolderIndex) -> None:
        from repocomp.index import Index, warm_kernels  # heavy import, kept off the server's start-up path

        def progress(done: int, total: int, phase: str) -> None:
            if self._on_progress is not None:
                self._on_progress(folder, done, total, phase)

        def partial(index: Any) -> None:  # between two batches of a large build: answer from what is indexed
            if folder.index is None:
                with folder.writing():
                    folder.index, folder.state = index, "partial"
                logger.info("index of %s: answering from %d file(s) while %d more are indexed", folder.root,
                            len(index.files), index.summary.pending_files)

        started = time.perf_counter()
        try:
            index = Index.open(folder.root, folder.config, build=True, progress=progress, checkpoint=partial,
                               writing=folder.writing)
            warm_kernels(folder.config)
            index = _up_to_date(index, progress, folder.writing)
        except Exception as exc:  # a failing index must not take the server down; completions stay in-file
            logger.exception("indexing %s failed", folder.root)
            with folder.writing():
                folder.index = None
                folder.state, folder.error = "failed", str(exc) or type(exc).__name__
        else:
            with folder.writing():
                folder.index, folder.state = index, "ready"
                folder.notices = list(index.notices)  # the server shows each once
                deferred, folder._deferred = folder._deferred, set()
            logger.info("index of %s ready in %.1f s", folder.root, time.perf_counter() - started)
            # what a loaded index's first update and first request make (about 2 s for a 7.6-million-line
            # monorepo): made now, beside the requests, rather than while a saved edit or the first completion
            # waits for it
            folder.lock.acquire_read()
            try:
                index.prepare()
            finally:
                folder.lock.release_read()
            heap.settle()  # the index's objects out of the collector's later passes
            for path in deferred:  # changes that raced the build: replay from disk
                self._replay(path)
        if self._on_state is not None:
            self._on_state(folder)


def _up_to_date(index: Any, progress: Callable[[int, int, str], None],
                writing: Callable[[], contextlib.AbstractContextManager[Any]]) -> Any:
    """`index` with the files changed on disk since it was stored applied (under `writing`: completions may read a
    partial index meanwhile); when applying them fails (a stored index whose tables an update cannot use), a fresh
    build of the folder instead, with a notice."""
    from repocomp.errors import RepocompError
    from repocomp.index import Index, catch_up

    try:
        changed = catch_up(index, progress, writing=writing)
        if changed:
            logger.info("index of %s: %d file(s) changed since it was stored", index.root.name, changed)
        return index
    except Exception as exc:  # noqa: BLE001 - any failure of a loaded index: the disk is the truth, build from it
        message = (f"the stored index of {index.root} could not be brought up to date "
                   f"({type(exc).__name__}: {exc}); rebuilt")
        logger.warning("%s", message, exc_info=not isinstance(exc, RepocompError))
    rebuilt = Index.build(index.root, index.config, progress)
    rebuilt.notices = [*index.notices, message]
    try:
        rebuilt.save()
    except RepocompError as exc:
        rebuilt.notice(f"{exc}; working from an index in memory")
    return rebuilt
