"""The server's foreground (`lsp_server.foreground`): a background checkpoint waits while a message is handled or a
request answered, not while the request waits on the model, and never longer than its bound; an update waits for
the requests being answered, their waits on the model included; a save's slices keep the longest a request ran
beside one."""

from __future__ import annotations

import asyncio
import threading
import time

from lsp_server.foreground import Foreground


def _hold(context, seconds: float, entered: threading.Event) -> threading.Thread:
    def run() -> None:
        with context():
            entered.set()
            time.sleep(seconds)
    thread = threading.Thread(target=run)
    thread.start()
    assert entered.wait(5)
    return thread


def test_a_checkpoint_goes_at_once_when_nothing_is_done_for_the_editor():
    began = time.monotonic()
    Foreground().wait_quiet(at_most_s=5)
    assert time.monotonic() - began < 0.5


def test_a_checkpoint_waits_until_the_request_or_message_is_done():
    for kind in ("serving", "busy"):
        fg = Foreground()
        thread = _hold(getattr(fg, kind), 0.3, threading.Event())
        began = time.monotonic()
        fg.wait_quiet(at_most_s=5)
        waited = time.monotonic() - began
        thread.join(5)
        assert 0.2 <= waited < 2.0, kind


def test_a_checkpoint_waits_at_most_its_bound():
    for wait in ("wait_quiet", "wait_unserved"):  # a save's checkpoint, an update's wait
        fg = Foreground()
        thread = _hold(fg.serving, 1.5, threading.Event())
        began = time.monotonic()
        getattr(fg, wait)(at_most_s=0.2)
        assert 0.15 <= time.monotonic() - began < 1.0, wait
        thread.join(5)


def test_a_request_waiting_on_the_model_holds_nothing_up_and_its_tasks_inherit_that():
    fg = Foreground()
    waited: list[float] = []

    async def request() -> None:
        with fg.serving():
            async def generation() -> None:  # a task the request starts, as the generations are
                with fg.waiting():
                    began = time.monotonic()
                    await asyncio.to_thread(fg.wait_quiet, 5)
                    waited.append(time.monotonic() - began)
            await asyncio.create_task(generation())

    asyncio.run(request())
    assert len(waited) == 1 and waited[0] < 0.5


def test_waiting_outside_a_request_counts_nothing_out():
    """A background task's wait on the model (a prefetch) does not let a save go past a request being answered."""
    fg = Foreground()
    thread = _hold(fg.serving, 0.3, threading.Event())
    with fg.waiting():
        began = time.monotonic()
        fg.wait_quiet(at_most_s=5)
        assert time.monotonic() - began >= 0.2
    thread.join(5)


def _spin(seconds: float) -> None:
    """CPU work for `seconds` of this thread's CPU time."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:  # (the clock is a system call: read it seldom, so the CPU time is the user's)
        for _ in range(20_000):
            pass


def test_the_slices_keep_the_most_cpu_a_write_spent_in_one_a_request_came_in():
    fg = Foreground()
    with fg.slices() as slices:  # made on the writing thread, as the save's are
        slices()  # the write's first checkpoint
        _spin(0.05)  # a slice with nothing beside it
        slices()
        assert slices.longest_ms == 0 and slices.count == 2
        _spin(0.05)  # a slice's first 50 ms of CPU alone
        came = threading.Event()
        request = _hold(fg.serving, 0.3, came)  # then a request, for 300 ms
        _spin(0.04)  # the slice's last 40 ms of CPU beside it
        time.sleep(0.1)  # and a wait on the disk: no CPU
        began = time.monotonic()
        slices()  # the slice ends: its checkpoint waits for the request
        assert time.monotonic() - began >= 0.05
        request.join(5)
        assert 70 <= slices.longest_ms < 130, slices.longest_ms  # the slice's CPU, not its waits
        _spin(0.03)
        slices()  # the next slice: nothing beside it
        assert 70 <= slices.longest_ms < 130 and slices.count == 4
    assert fg._watching == []  # noqa: SLF001 - the write's slices let go


def test_an_update_waits_for_the_requests_being_answered_even_while_they_wait_on_the_model():
    fg = Foreground()
    assert not fg.answering()
    began = time.monotonic()
    fg.wait_unserved(at_most_s=5)  # nothing answered: at once
    assert time.monotonic() - began < 0.5

    def on_the_model() -> None:
        with fg.serving(), fg.waiting():
            entered.set()
            time.sleep(0.3)

    entered = threading.Event()
    thread = threading.Thread(target=on_the_model)
    thread.start()
    assert entered.wait(5) and fg.answering() and not fg.is_busy()
    began = time.monotonic()
    fg.wait_unserved(at_most_s=5)
    assert 0.2 <= time.monotonic() - began < 2.0 and not fg.answering()
    thread.join(5)


def test_a_message_handled_beside_a_slice_counts_as_a_request_does():
    fg = Foreground()
    with fg.slices() as slices:
        slices()
        message = _hold(fg.busy, 0.3, threading.Event())  # a notification decoded and dispatched, no request
        _spin(0.04)  # the slice's CPU beside it
        slices()  # waits for the message
        message.join(5)
        assert 30 <= slices.longest_ms < 100, slices.longest_ms


def test_an_update_waits_for_a_gap_after_a_burst_of_requests_and_at_most_its_bound():
    fg = Foreground()
    burst_over = threading.Event()

    def burst() -> None:  # keys typed as fast as each is answered: 10 requests 50 ms apart
        for _ in range(10):
            with fg.serving():
                time.sleep(0.01)
            time.sleep(0.04)
        burst_over.set()

    thread = threading.Thread(target=burst)
    began = time.monotonic()
    thread.start()
    time.sleep(0.02)
    fg.wait_unserved(at_most_s=5, gap_s=0.15)  # a gap longer than those between the keys: after the last
    assert burst_over.is_set() and 0.45 <= time.monotonic() - began < 2.0
    thread.join(5)

    waited = time.monotonic()
    fg.wait_unserved(at_most_s=5, gap_s=0.15)  # the last request answered long enough ago: at once
    assert time.monotonic() - waited < 0.1

    with fg.serving():
        pass
    waited = time.monotonic()
    fg.wait_unserved(at_most_s=0.05, gap_s=1.0)  # a gap longer than the bound: the bound
    assert 0.03 <= time.monotonic() - waited < 0.5
