"""What the server does for the editor now (`FOREGROUND`), so that its background work waits for it: a save of the
index waits between its slices (`repocomp.index.yielding`) until no message is being handled and no request is
being answered, but for a request's wait on the model, which needs no interpreter.

The two share one interpreter lock. Each time a request let go of it (a numpy call, a read of the index file, the
event loop's wait for the next message) a save beside it took it for up to the interpreter's switch interval: a
monorepo's requests in the first seconds of a save took 150-270 ms against 60-120."""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Iterator

YIELD_AT_MOST_S = 1.0  # a background slice waits for the foreground at most this long (a stuck request stalls nothing)

# this task answers a request (`serving()`): its waits on the model give the interpreter to the background
_SERVING: contextvars.ContextVar[bool] = contextvars.ContextVar("repocomp_serving", default=False)


class Foreground:
    def __init__(self) -> None:
        self._count = 0  # messages being handled and requests being answered, less those waiting on the model
        self._quiet = threading.Condition()

    def _add(self, delta: int) -> None:
        with self._quiet:
            self._count += delta
            if self._count <= 0:
                self._quiet.notify_all()

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
        self._add(1)
        try:
            yield
        finally:
            self._add(-1)
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

    def wait_quiet(self, at_most_s: float = YIELD_AT_MOST_S) -> None:
        """Until nothing is done for the editor, at most `at_most_s` (a background slice's checkpoint)."""
        with self._quiet:
            self._quiet.wait_for(lambda: self._count <= 0, timeout=at_most_s)


FOREGROUND = Foreground()
