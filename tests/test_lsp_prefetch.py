"""The prefetcher's rules (lsp_server.prefetch): the notification's shape, one prefetch at a time, a request's
cancel, and at most half the time spent prefetching. The server's handling over LSP is in test_lsp_server.py."""

from __future__ import annotations

import asyncio
import time
from collections import namedtuple

from lsp_server.prefetch import Prefetcher, prefetch_target

Document = namedtuple("Document", ["uri"])
Position = namedtuple("Position", ["line", "character"])
Params = namedtuple("Params", ["textDocument", "position"])


def test_the_notification_names_a_document_and_a_line_or_is_refused() -> None:
    assert prefetch_target(Params(Document("file:///a.py"), Position(3, 7))) == ("file:///a.py", 3)
    for bad in (None, {"textDocument": {"uri": "file:///a.py"}}, Params("file:///a.py", Position(3, 0)),
                Params(Document("file:///a.py"), Position(-1, 0)), Params(Document("file:///a.py"), Position(True, 0)),
                Params(Document(7), Position(3, 0))):
        assert prefetch_target(bad) is None, bad


async def test_a_newer_prefetch_replaces_the_running_one_and_waits_as_long_as_the_last_one_ran() -> None:
    prefetcher, ran = Prefetcher(), []

    async def work(name: str, seconds: float) -> None:
        started = time.monotonic()
        await asyncio.sleep(seconds)
        ran.append((name, started, time.monotonic()))

    prefetcher.start(lambda: work("first", 10))
    await asyncio.sleep(0.05)
    prefetcher.start(lambda: work("second", 0.3))  # the cursor moved on: the first stops
    while prefetcher.done < 1:
        await asyncio.sleep(0.02)
    assert prefetcher.cancelled == 1 and [name for name, _, _ in ran] == ["second"]
    prefetcher.start(lambda: work("third", 0.0))
    while prefetcher.done < 2:
        await asyncio.sleep(0.02)
    (_, second_start, second_end), (name, third_start, _) = ran
    # the third started no sooner after the second ended than the second ran
    assert name == "third" and third_start - second_end >= second_end - second_start >= 0.3
    assert prefetcher.stats()["done"] == 2 and prefetcher.stats()["running"] == 0
    prefetcher.start(lambda: work("fourth", 10))
    await prefetcher.close()  # shutdown: the running one stops
    assert prefetcher.cancelled == 2 and prefetcher.done == 2
