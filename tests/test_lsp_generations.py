"""The server's request policy in isolation: reuse of a generation, the typing-rate wait, no generation for a
superseded request, cancellation (`lsp_server.generations`, `lsp_server.debounce`)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from lsp_server.debounce import MAX_WAIT_S, TypingRate
from lsp_server.generations import Generations, Site


@dataclass
class Result:
    text: str


class Engine:
    """A fake engine: each generation takes `seconds` and completes with `text`."""

    def __init__(self, text: str, seconds: float = 0.2) -> None:
        self.text, self.seconds, self.started, self.cancelled = text, seconds, 0, 0

    def make(self):
        async def generate() -> Result:
            self.started += 1
            try:
                await asyncio.sleep(self.seconds)
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
            return Result(self.text)
        return generate


def site(before: str, after: str = "\n") -> Site:
    return Site(before, after, index_stamp=1)


def unchanged() -> bool:
    return False


async def test_typing_through_a_finished_generation_is_served_its_rest() -> None:
    gens, engine = Generations(), Engine("apply_discount(total)")
    first = await gens.run("doc", site("x = "), engine.make(), unchanged)
    assert first is not None and first.text == "apply_discount(total)"
    typed = await gens.run("doc", site("x = apply_"), engine.make(), unchanged)
    assert typed is not None and typed.text == "discount(total)" and engine.started == 1


async def test_a_running_generation_serves_the_request_that_typed_into_it() -> None:
    gens, engine = Generations(), Engine("apply_discount(total)", seconds=0.3)
    older = asyncio.ensure_future(gens.run("doc", site("x = "), engine.make(), unchanged))
    await asyncio.sleep(0.1)
    newer = await gens.run("doc", site("x = ap"), engine.make(), unchanged)
    assert await older is None  # superseded: the editor moved on
    assert newer is not None and newer.text == "ply_discount(total)"
    assert engine.started == 1 and engine.cancelled == 0 and gens.stats.reused == 1


async def test_a_draft_that_no_longer_matches_or_a_moved_cursor_starts_over() -> None:
    gens, engine = Generations(), Engine("apply_discount(total)")
    await gens.run("doc", site("x = "), engine.make(), unchanged)
    assert (await gens.run("doc", site("x = zz"), engine.make(), unchanged)).text == "apply_discount(total)"
    assert engine.started == 2  # typed "zz": not what the draft says
    await gens.run("doc", site("x = zz", after=" + 1\n"), engine.make(), unchanged)
    assert engine.started == 3  # other text after the cursor
    await gens.run("doc", Site("x = zz", " + 1\n", index_stamp=2), engine.make(), unchanged)
    assert engine.started == 4  # the index changed (a save): the same place starts over
    gens, engine = Generations(), Engine("apply_discount(total)")
    await gens.run("doc", site("x = "), engine.make(), unchanged)
    typed = await gens.run("doc", Site("x = app", "\n", index_stamp=2), engine.make(), unchanged)
    assert typed is not None and typed.text == "ly_discount(total)" and engine.started == 1  # typed into it: served
    await gens.run("doc", Site("x = appl", "\n", index_stamp=2, index_ready=False), engine.make(), unchanged)
    assert engine.started == 2  # the index is not the one the suggestion was made with (in-file, or ready since)


async def test_a_request_superseded_while_the_user_types_starts_no_generation() -> None:
    gens, engine = Generations(), Engine("rest", seconds=0.4)
    await gens.run("doc", site("a"), engine.make(), unchanged)  # the typical generation: 0.4 s
    for _ in range(8):  # typing fast, a request per keystroke: the next request waits before generating
        gens.rate.changed("doc", 1)
        gens.rate.requested("doc")
    waiting = asyncio.ensure_future(gens.run("doc", site("b"), engine.make(), unchanged))
    await asyncio.sleep(0.02)
    latest = asyncio.ensure_future(gens.run("doc", site("bc"), engine.make(), lambda: True))
    assert await waiting is None and await latest is None  # superseded; the document changed after `latest`
    assert engine.started == 1 and gens.stats.skipped == 2


async def test_cancelling_the_only_request_cancels_its_generation() -> None:
    gens, engine = Generations(), Engine("rest", seconds=5)
    request = asyncio.ensure_future(gens.run("doc", site("a"), engine.make(), unchanged))
    await asyncio.sleep(0.05)
    request.cancel()  # $/cancelRequest
    with pytest.raises(asyncio.CancelledError):
        await request
    await asyncio.sleep(0.01)
    assert engine.cancelled == 1


def test_the_wait_follows_the_typing_rate() -> None:
    rate = TypingRate()
    assert rate.wait_s("doc", 1.0, now=10.0) == 0.0  # not typing: no wait
    for i in range(12):  # 8 keys a second, a request after each (VS Code asks at every keystroke)
        rate.changed("doc", 1, now=10.0 + i * 0.125)
        rate.requested("doc", now=10.0 + i * 0.125)
    # a quiet time of 1.5 keystroke intervals, counted from the last key (at 11.375)
    assert rate.wait_s("doc", 1.0, now=11.4) == pytest.approx(1.5 * 0.125 - 0.025, rel=0.01)
    assert rate.wait_s("doc", 1.0, now=11.6) == 0.0  # quiet for longer already (an editor's own debounce): at once
    assert rate.wait_s("doc", 0.2, now=11.375) == pytest.approx(0.5 * 0.2)  # at most half a wasted generation
    assert rate.wait_s("doc", 0.1, now=11.375) == 0.0  # a generation quicker than a keystroke: it ends first
    assert rate.wait_s("doc", 1.0, now=20.0) == 0.0  # a pause: no wait
    for i in range(3):  # 2 keys a second: the cap
        rate.changed("doc", 1, now=30.0 + i * 0.5)
        rate.requested("doc", now=30.0 + i * 0.5)
    assert rate.wait_s("doc", 1.0, now=31.0) == MAX_WAIT_S


def test_no_wait_for_an_editor_that_debounces_its_requests() -> None:
    # Neovim asks only after 200 ms without a keystroke, and flushes its batched didChange just before asking: the
    # text looks fresh although the user paused. 12 keys at 8 a second, one request at the end: no wait.
    rate = TypingRate()
    for i in range(12):
        rate.changed("doc", 1, now=10.0 + i * 0.125)
    rate.changed("doc", 1, now=11.5)  # the flushed didChange
    rate.requested("doc", now=11.5)
    assert rate.wait_s("doc", 1.0, now=11.5) == 0.0
    for i in range(12):  # the same keys with a request after each (VS Code): the server's wait applies
        rate.requested("doc", now=10.0 + i * 0.125)
    assert rate.wait_s("doc", 1.0, now=11.5) == pytest.approx(1.5 * 1.5 / 13)
