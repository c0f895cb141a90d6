"""At most one generation per document, shared by every request it can still serve.

A request for a document supersedes the previous one (which answers empty at once: the editor moved on). What
happens to the previous request's generation depends on the new request:
- it *extends* the generation's text (same text after the cursor, same index, the text before the cursor grew
  by what the user typed since): the generation is kept, and when its completion starts with what was typed, the
  new request is served the rest of it (running: once it ends; finished: at once) — typing through ghost text
  costs no new generation;
- otherwise the generation is cancelled (its backend stream closes, so vLLM aborts it), and the new request
  waits as long as the typing rate says (`lsp_server.debounce`; at most half a typical generation's time, so
  nothing with a fast backend, nor for an editor that debounces its requests itself) before starting its own;
  superseded while waiting, or its document changed meanwhile, it starts nothing.
`$/cancelRequest` cancels a request, and its generation when no other request waits for it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from lsp_server.debounce import TypingRate
from repocomp.prompt.cursor import Cut


class Answer(Protocol):
    """What a generation produces: the engine's result, of which only the text matters here."""

    @property
    def text(self) -> str: ...


R = TypeVar("R", bound=Answer)


@dataclass(frozen=True)
class Site:
    """Where a request completes: the document around the cursor, and the index generation it completes with."""

    before: str  # document text before the cursor
    after: str  # document text after the cursor
    index_stamp: Hashable  # changes when the index behind the completion changes (an update, a save)
    index_ready: bool = True  # the folder's index was ready (before: the completion was in-file)

    @classmethod
    def of(cls, cut: Cut, index_stamp: Hashable, index_ready: bool) -> Site:
        return cls(cut.before, cut.after, index_stamp, index_ready)

    def typed_since(self, earlier: Site) -> str | None:
        """What was typed at the cursor since `earlier`, or None when this is not `earlier` plus typing.

        A request at the same place after the index changed (a save) starts over; characters typed since go on
        being served from the suggestion the user sees whatever else the index took in meanwhile (this buffer,
        synced while the user read the suggestion), unless the index became ready since (an in-file answer)."""
        if self.after != earlier.after or self.index_ready != earlier.index_ready:
            return None
        if not self.before.startswith(earlier.before):
            return None
        typed = self.before[len(earlier.before):]
        return typed if typed or self.index_stamp == earlier.index_stamp else None


@dataclass
class _Generation(Generic[R]):
    site: Site
    task: asyncio.Task[R]
    waiters: int = 0

    def reusable(self) -> bool:
        return not self.task.done() or (not self.task.cancelled() and self.task.exception() is None)


@dataclass
class Served(Generic[R]):
    """A request's answer: the engine's result, of which the first `typed` characters were typed already."""

    result: R
    typed: str = ""

    @property
    def text(self) -> str:
        return self.result.text[len(self.typed):]


@dataclass
class GenerationStats:
    started: int = 0
    reused: int = 0  # requests served from a generation started for an earlier request
    skipped: int = 0  # requests superseded before their generation would have started


@dataclass
class Generations(Generic[R]):
    rate: TypingRate = field(default_factory=TypingRate)
    stats: GenerationStats = field(default_factory=GenerationStats)
    _current: dict[str, _Generation[R]] = field(default_factory=dict)
    _superseded: dict[str, asyncio.Future[None]] = field(default_factory=dict)
    _typical_s: float = 0.0  # how long generations take lately

    async def run(self, key: str, site: Site, make: Callable[[], Awaitable[R]],
                  changed: Callable[[], bool]) -> Served[R] | None:
        """The answer for a request at `site`; None when a newer request for `key` superseded it.

        `make` starts the engine's completion; `changed()` says whether the document changed since the request.
        """
        self.rate.requested(key)
        superseded = self._take_turn(key)
        gen = self._current.get(key)
        typed = site.typed_since(gen.site) if gen is not None and gen.reusable() else None
        if gen is not None and typed is not None:
            result = await self._wait(gen, superseded)
            if superseded.done():
                return None
            if result is not None and result.text.startswith(typed):
                self.stats.reused += 1
                return Served(result, typed)
        if gen is not None and not gen.task.done():
            gen.task.cancel()
            await asyncio.wait([gen.task])  # its backend stream is closed before ours opens
        wait_s = self.rate.wait_s(key, self._typical_s)
        if wait_s > 0:
            await asyncio.wait([superseded], timeout=wait_s)
        if superseded.done() or changed():
            self.stats.skipped += 1
            return None
        self.stats.started += 1
        gen = self._current[key] = _Generation(site, asyncio.ensure_future(self._timed(make)))
        gen.task.add_done_callback(lambda t: t.cancelled() or t.exception())  # nobody may be left to read it
        result = await self._wait(gen, superseded)
        return None if result is None else Served(result)

    async def _timed(self, make: Callable[[], Awaitable[R]]) -> R:
        started = time.monotonic()
        result = await make()
        elapsed = time.monotonic() - started
        # a moving average, seeded by the first generation (from 0 it would start at 30% of the real time)
        self._typical_s = elapsed if self._typical_s == 0 else self._typical_s + 0.3 * (elapsed - self._typical_s)
        return result

    def _take_turn(self, key: str) -> asyncio.Future[None]:
        previous = self._superseded.get(key)
        if previous is not None and not previous.done():
            previous.set_result(None)
        turn = self._superseded[key] = asyncio.get_running_loop().create_future()
        return turn

    async def _wait(self, gen: _Generation[R], superseded: asyncio.Future[None]) -> R | None:
        """The generation's result; None if it was cancelled or this request was superseded first. Cancelling
        the caller (`$/cancelRequest`) cancels the generation too when nobody else waits for it."""
        gen.waiters += 1
        try:
            either: list[asyncio.Future[Any]] = [gen.task, superseded]
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            if gen.waiters == 1:
                gen.task.cancel()
            raise
        finally:
            gen.waiters -= 1
        if not gen.task.done() or gen.task.cancelled():
            return None
        return gen.task.result()  # raises the generation's error (the caller reports it)

    def cancel(self, key: str) -> None:
        """The document closed: stop its generation and forget it."""
        gen = self._current.pop(key, None)
        if gen is not None:
            gen.task.cancel()
        turn = self._superseded.pop(key, None)
        if turn is not None and not turn.done():
            turn.set_result(None)  # a request still waiting for its turn gives up
        self.rate.forget(key)

    async def cancel_all(self) -> None:
        tasks = [g.task for g in self._current.values() if not g.task.done()]
        self._current.clear()
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=2)
