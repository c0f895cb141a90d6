"""What the server does for the editor now (`FOREGROUND`), so that its background work waits for it: a save of the
index waits between its slices (`repocomp.index.yielding`) until no message is being handled and no request is
being answered, but for a request's wait on the model, which needs no interpreter.

The two share one interpreter lock. Each time a request let go of it (a numpy call, a read of the index file, the
event loop's wait for the next message) a save beside it took it for up to the interpreter's switch interval: a
monorepo's requests in the first seconds of a save took 150-270 ms against 60-120. What a save can still cost a
request is the slice it was in when the request came: `slices()` keeps the longest such slice, in the save's user CPU
time.
"""

from __future__ import annotations

import contextlib
import contextvars
import resource
import threading
import time
from collections.abc import Iterator

YIELD_AT_MOST_S = 1.0  # a background slice waits for the foreground at most this long (a stuck request stalls nothing)

# this task answers a request (`serving()`): its waits on the model give the interpreter to the background
_SERVING: contextvars.ContextVar[bool] = contextvars.ContextVar("repocomp_serving", default=False)


def _user_time() -> float:
    """This thread's CPU time in user mode, where the interpreter's lock is held (Linux); elsewhere all its CPU
    time. The kernel's time (a write's copy, an fsync: 120 ms of a monorepo's save) holds no lock."""
    try:
        return resource.getrusage(resource.RUSAGE_THREAD).ru_utime
    except (AttributeError, OSError):
        return time.thread_time()


class Slices:
    """A background write's checkpoints (its `yielding_to` wait), called on the writing thread: each waits for the
    foreground, and `longest_ms` is the most user CPU time the writer spent in one slice during which a message or
    request was handled: at most what the slice delayed it (the two share the interpreter's lock). Wall time
    would count the writer's waits on the disk (a 1.8 GB file's fsync: 1 s), which hold nothing up. Linux takes a
    thread's user/system split from samples at its scheduler tick, rescaled to the exact total: a slice's user
    time is bounded by the thread's exact CPU time in it."""

    def __init__(self, foreground: Foreground) -> None:
        self._foreground = foreground
        self._started = (_user_time(), time.thread_time())
        self._beside = False  # the foreground was busy in this slice
        self.longest_ms = 0.0
        self.count = 0

    def woke(self) -> None:
        """The foreground became busy (told by it)."""
        self._beside = True

    def __call__(self) -> None:
        if self._beside:
            user, cpu = _user_time() - self._started[0], time.thread_time() - self._started[1]
            self.longest_ms = max(self.longest_ms, min(user, cpu) * 1000)
        self._foreground.wait_quiet()
        self._beside = False  # then a request that comes (or is still there: the wait's bound passed) is beside it
        if self._foreground.is_busy():
            self._beside = True
        self._started = (_user_time(), time.thread_time())
        self.count += 1


class Foreground:
    def __init__(self) -> None:
        self._count = 0  # messages being handled and requests being answered, less those waiting on the model
        self._requests = 0  # requests being answered, those waiting on the model included
        self._answered_at = 0.0  # time.monotonic() when the last request being answered was answered
        self._quiet = threading.Condition()
        self._watching: list[Slices] = []

    def _add(self, delta: int, requests: int = 0) -> None:
        with self._quiet:
            before = self._count
            self._count += delta
            self._requests += requests
            if requests < 0 and self._requests <= 0:
                self._answered_at = time.monotonic()
            if self._count <= 0 or self._requests <= 0:
                self._quiet.notify_all()
            if before <= 0 < self._count:
                for slices in self._watching:
                    slices.woke()

    def is_busy(self) -> bool:
        return self._count > 0

    def answering(self) -> bool:
        """A request is being answered (waiting on the model or not)."""
        return self._requests > 0

    @contextlib.contextmanager
    def busy(self) -> Iterator[None]:
        """A message being decoded and dispatched (the event loop's own work)."""
        self._add(1)
        try:
            yield
        finally:
            self._add(-1)

    @contextlib.contextmanager
    def serving(self) -> Iterator[None]:
        """A request being answered (the tasks it starts inherit it: their waits on the model count out)."""
        token = _SERVING.set(True)
        self._add(1, requests=1)
        try:
            yield
        finally:
            self._add(-1, requests=-1)
            _SERVING.reset(token)

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        """Inside `serving()`: a wait that needs no interpreter (a model generating); elsewhere nothing."""
        if not _SERVING.get():
            yield
            return
        self._add(-1)
        try:
            yield
        finally:
            self._add(1)

    @contextlib.contextmanager
    def slices(self) -> Iterator[Slices]:
        """A background write's checkpoints, which wait for the foreground and measure what they cost it."""
        slices = Slices(self)
        with self._quiet:
            self._watching.append(slices)
        try:
            yield slices
        finally:
            with self._quiet:
                self._watching.remove(slices)

    def wait_quiet(self, at_most_s: float = YIELD_AT_MOST_S) -> None:
        """Until nothing is done for the editor, at most `at_most_s` (a background slice's checkpoint)."""
        with self._quiet:
            self._quiet.wait_for(lambda: self._count <= 0, timeout=at_most_s)

    def wait_unserved(self, at_most_s: float, gap_s: float = 0.0) -> None:
        """Until no request is being answered, its waits on the model included, nor was for `gap_s`, at most
        `at_most_s`: an update of the index takes the write lock, which a request holds while it reads and takes
        again after the model, and keys typed in a burst come one as the one before is answered."""
        deadline = time.monotonic() + at_most_s
        with self._quiet:
            while (now := time.monotonic()) < deadline:
                if self._requests > 0:
                    self._quiet.wait(deadline - now)  # told when the last is answered
                elif (quiet_s := now - self._answered_at) < gap_s:
                    self._quiet.wait(min(gap_s - quiet_s, deadline - now))
                else:
                    return


FOREGROUND = Foreground()
