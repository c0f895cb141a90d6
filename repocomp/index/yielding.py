"""Where a long write of the index lets requests go first: `checkpoint()` between its slices waits for the wait
that `yielding_to` set on this thread (the language server's: until it handles no message and answers no request,
`lsp_server.foreground`).

A save beside the requests shares one interpreter lock with them: each time a request let go of it (a numpy or
numba call, a read of the index file) the save took it for its next few milliseconds, and a monorepo's requests in
the first seconds of a save took 4 to 5 times as long (the save decoding every file's parse: 500-950 ms against
60-120). Slices of a few milliseconds and a wait at each end keep the lock for the requests."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

_T = TypeVar("_T")
_local = threading.local()

EVERY = 64  # items of a loop over files between two checkpoints (a file's parse decoded: ~0.1 ms)
SPAN = 1 << 20  # entries of an array checked between two checkpoints (~1 ms; a monorepo's tables hold 10^8)


@contextlib.contextmanager
def yielding_to(wait: Callable[[], None]) -> Iterator[None]:
    """This thread's checkpoints call `wait` until the block ends."""
    before = getattr(_local, "wait", None)
    _local.wait = wait
    try:
        yield
    finally:
        _local.wait = before


def checkpoint() -> None:
    """Between two slices of a long write: wait as this thread's `yielding_to` says (nothing otherwise)."""
    wait = getattr(_local, "wait", None)
    if wait is not None:
        wait()


def paced(items: Iterable[_T], every: int = EVERY) -> Iterator[_T]:
    """`items`, with a checkpoint before every `every`th."""
    for i, item in enumerate(items):
        if i % every == 0:
            checkpoint()
        yield item


def spans(n: int, size: int = SPAN) -> Iterator[slice]:
    """Slices of `size` covering `range(n)`, with a checkpoint between two."""
    for at in range(0, n, size):
        if at:
            checkpoint()
        yield slice(at, min(n, at + size))
