"""The prefetcher's rules (lsp_server.prefetch): the notification's shape, one prefetch at a time, a request's
cancel (no wait after it: the request reuses the work), at most half the time spent prefetching, and the pause after an edit standing for a cursor at rest. The server's handling over LSP is in test_lsp_server.py."""

from __future__ import annotations

import asyncio
import time
from collections import namedtuple

from lsprotocol import types

from lsp_server.prefetch import Prefetcher, edited_line, prefetch_target

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
    prefetcher.start(lambda: work("fourth", 0.3))
    await asyncio.sleep(0.5)  # it ran its 0.3 s: the next waits as long
    prefetcher.start(lambda: work("fifth", 10))
    await asyncio.sleep(0.5)  # running since about 0.2 s ago
    prefetcher.cancel()  # a request: it reuses what the fifth computed, so the next starts at once
    began = time.monotonic()
    prefetcher.start(lambda: work("sixth", 0.0))
    while prefetcher.done < 4:
        await asyncio.sleep(0.02)
    assert ran[-1][0] == "sixth" and ran[-1][1] - began < 0.15, ran[-1]
    prefetcher.start(lambda: work("seventh", 10))
    await prefetcher.close()  # shutdown: the running one stops
    assert prefetcher.cancelled == 3 and prefetcher.done == 4


def _change(line: int, character: int, text: str) -> types.TextDocumentContentChangePartial:
    at = types.Position(line=line, character=character)
    return types.TextDocumentContentChangePartial(range=types.Range(start=at, end=at), text=text)


def test_an_edit_ends_on_the_line_its_last_change_leaves_the_text_on() -> None:
    assert edited_line([_change(4, 2, "x")]) == 4
    assert edited_line([_change(9, 0, "y"), _change(4, 2, "a\n    b")]) == 5  # Enter typed: the line opened below
    assert edited_line([types.TextDocumentContentChangeWholeDocument(text="whole\n")]) is None  # says no place
    assert edited_line([]) is None


async def test_a_pause_after_edits_starts_one_prefetch_unless_a_request_comes_or_the_editor_sends_its_own() -> None:
    prefetcher, started = Prefetcher(pause_s=0.2), []
    for n in range(3):  # typing: each edit puts the pause off
        prefetcher.after_pause(lambda n=n: started.append(n))
        await asyncio.sleep(0.05)
    assert started == []
    await asyncio.sleep(0.3)
    assert started == [2] and prefetcher.stats()["after_edits"] == 1  # the last edit's line, once

    prefetcher.after_pause(lambda: started.append(3))
    await asyncio.sleep(0.05)
    prefetcher.cancel()  # a request came during the pause: it has what a prefetch would lay
    await asyncio.sleep(0.3)
    assert started == [2]

    prefetcher.after_pause(lambda: started.append(4))
    await asyncio.sleep(0.05)
    prefetcher.client_sends = True  # during the pause, the editor says where the cursor rests: edits start none
    await asyncio.sleep(0.3)
    prefetcher.after_pause(lambda: started.append(5))
    await asyncio.sleep(0.3)
    assert started == [2] and prefetcher.after_edits == 1
