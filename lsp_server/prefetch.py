"""Prefetch: the editor says where the cursor rests (`repocomp/prefetch`, sent after a pause), and the engine lays
the context of that line and computes its prompt into the model's prefix cache, nothing written. A request there
soon after (typing on the line, or a new line opened below it: `[retrieval] keep_lines`) finds its context laid and
its prompt computed up to the line, so only the rest is computed (docs/performance.md, The local model).

The model is the requests' first: a request cancels the prefetch (the pieces computed stay in the cache), and the
backend stops a prefill between two pieces when a generation waits for the model (repocomp.backends.openvino).
One prefetch at a time: a newer one replaces it, and starts no sooner after the previous one ended than that one
ran, so that prefetching takes at most half the time of a developer who keeps moving the cursor. One a request
stopped is not counted so: the request reuses what it computed, and the next rest may prefetch at once. A backend
without a prefill (`PrefillingBackend`: the in-process runtimes but llama.cpp have one) computes nothing; the
context is laid all the same.

An editor that sends no prefetch (Emacs with eglot, Helix, VS Code without an extension) says where the developer
edits: once its changes have paused `EDIT_PAUSE_S` with no request meanwhile, the line where the last change ended
is prefetched as if the cursor rested there (a developer who stops typing to think, then asks or types on). Once an
editor sends `repocomp/prefetch` itself, its word is taken instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from lsprotocol import types

logger = logging.getLogger(__name__)

__all__ = ["EDIT_PAUSE_S", "PREFETCH_METHOD", "Prefetcher", "edited_line", "prefetch_target"]

# the custom notification: {"textDocument": {"uri": ...}, "position": {"line": ..., "character": ...}}
PREFETCH_METHOD = "repocomp/prefetch"
# the pause after an edit that stands for a cursor at rest: longer than the Neovim snippet's rest (300 ms), so that an
# editor that sends its own prefetch is heard before the server guesses
EDIT_PAUSE_S = 0.5


def prefetch_target(params: object) -> tuple[str, int] | None:
    """The notification's document and line (pygls hands a custom method's params over as named tuples); None when
    they are not that shape."""
    document, position = getattr(params, "textDocument", None), getattr(params, "position", None)
    uri, line = getattr(document, "uri", None), getattr(position, "line", None)
    if not isinstance(uri, str) or not isinstance(line, int) or isinstance(line, bool) or line < 0:
        return None
    return uri, line


def edited_line(changes: Sequence[types.TextDocumentContentChangeEvent]) -> int | None:
    """The line where the last of a didChange's changes ends, as the document reads after it; None for a change of
    the whole document (it says nothing of where the developer is)."""
    last = changes[-1] if changes else None
    if not isinstance(last, types.TextDocumentContentChangePartial):
        return None
    return last.range.start.line + last.text.count("\n")


@dataclass
class _Run:
    used_by_request: bool = False  # stopped by a request, which reuses what it computed


class Prefetcher:
    """At most one prefetch running, or one waiting for the pause after an edit; counts for `repocomp/stats`."""

    def __init__(self, pause_s: float = EDIT_PAUSE_S) -> None:
        self.pause_s = pause_s
        self._task: asyncio.Task[None] | None = None
        self._run_now = _Run()
        self._pause: asyncio.TimerHandle | None = None
        self.client_sends = False  # the editor sends repocomp/prefetch: it knows where the cursor rests
        self.after_edits = 0  # prefetches started by a pause after an edit
        self._free_at = 0.0  # time.monotonic() from which the next may start: the last one's end plus its length
        self.done = 0
        self.cancelled = 0
        self.done_ms: deque[float] = deque(maxlen=200)  # the finished ones' time, retrieval and prefill

    def start(self, work: Callable[[], Awaitable[Any]]) -> None:
        """Run `work()` (the engine's prefill request) in the background, in place of the one running."""
        self._stop(by_request=False)
        run = _Run()
        self._run_now, self._task = run, asyncio.get_running_loop().create_task(self._run(work, run))

    def after_pause(self, start: Callable[[], None]) -> None:
        """An edit, in an editor that sends no prefetch: `start()` once `pause_s` pass with no other edit or
        request (each puts the wait off or ends it)."""
        self._stop_waiting()
        if not self.client_sends:
            self._pause = asyncio.get_running_loop().call_later(self.pause_s, self._paused, start)

    def _paused(self, start: Callable[[], None]) -> None:
        self._pause = None
        if not self.client_sends:  # (the editor's own may have come during the pause)
            self.after_edits += 1
            start()

    def _stop_waiting(self) -> None:
        if self._pause is not None:
            self._pause.cancel()
            self._pause = None

    async def _run(self, work: Callable[[], Awaitable[Any]], run: _Run) -> None:
        await asyncio.sleep(max(0.0, self._free_at - time.monotonic()))
        started = time.monotonic()
        try:
            await work()
        except Exception:  # noqa: BLE001 - a prefetch is never worth a failure; a cancellation goes through
            logger.info("prefetch failed", exc_info=True)
            return
        finally:
            ended = time.monotonic()
            self._free_at = ended if run.used_by_request else 2 * ended - started
        self.done += 1
        self.done_ms.append((ended - started) * 1000)

    def cancel(self) -> None:
        """A request wants the model: the prefetch running stops (what it computed stays cached, the request's
        now), and none starts for the pause it ends."""
        self._stop_waiting()
        self._stop(by_request=True)

    def _stop(self, by_request: bool) -> None:
        if self._task is not None and not self._task.done():
            self._run_now.used_by_request = by_request
            self._task.cancel()
            self.cancelled += 1
        self._task = None

    async def close(self) -> None:
        task = self._task
        self.cancel()
        if task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def stats(self) -> dict[str, Any]:
        return {"done": self.done, "cancelled": self.cancelled, "after_edits": self.after_edits,
                "running": int(self._task is not None and not self._task.done()), "done_ms": list(self.done_ms)}
