"""The session summaries written while the editor is idle (`[memory] summaries`, repocomp.memory.summaries).

The model that completes also summarizes, on the same CPU: a summary must never delay typing. So every request
and every edit cancels the summary being written (the generation stops at its next token and nothing is kept)
and re-arms the folder's idle timer; after `[memory] summary_idle_s` without either, one summary is written
(bounded in input, output and time by repocomp.memory.summaries), then the timer waits for the next activity.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from repocomp.memory.summaries import write_summary

if TYPE_CHECKING:
    from repocomp.memory.session import SessionMemory

logger = logging.getLogger(__name__)

__all__ = ["SummaryWriter"]


class SummaryWriter:
    """One idle timer (and at most one summary being written) per session memory."""

    def __init__(self) -> None:
        self._tasks: dict[int, asyncio.Task[None]] = {}  # id(memory) -> its timer or summary
        self.written = 0

    def activity(self, memory: SessionMemory | None, backend: Callable[[], Any], idle_s: float) -> None:
        """A request or an edit: every summary being written stops; `memory`'s timer (if it summarizes) restarts.
        `backend()` gives the model when the timer fires (the folder's configuration may change meanwhile)."""
        self.cancel_all()
        if memory is None or memory.summary is None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a test driving the server's parts directly): nothing to schedule
            return
        key = id(memory)
        task = loop.create_task(self._write_when_idle(memory, backend, idle_s))
        self._tasks[key] = task
        task.add_done_callback(lambda t: self._tasks.pop(key, None) if self._tasks.get(key) is t else None)

    async def _write_when_idle(self, memory: SessionMemory, backend: Callable[[], Any], idle_s: float) -> None:
        await asyncio.sleep(idle_s)
        assert memory.summary is not None
        try:
            if await write_summary(memory.summary, memory.hunks(), backend()):
                self.written += 1
        except Exception:  # noqa: BLE001 - never worth a failure (the template stays); a cancellation goes through
            logger.info("session summary not written", exc_info=True)

    def cancel_all(self) -> None:
        for task in list(self._tasks.values()):
            task.cancel()
        self._tasks.clear()

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        self.cancel_all()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def busy(self) -> int:
        """Timers armed or summaries being written."""
        return len(self._tasks)
