"""Handing freed heap memory back to the system after the index's churn and a walk's texts (glibc; elsewhere a
no-op); and keeping an index's objects out of the cyclic collector's passes (`uncollected`).

Each keystroke's index update and each batch of a build allocate and free numpy temporaries; glibc keeps freed
memory in its arenas, and after the first large free it raises its mmap threshold (up to 32 MiB), so later large
blocks come from the arenas too and stay resident once freed: an editing session's RSS grows although its live data
does not. While a folder is built in batches (`large_blocks_given_back`: the build and its saves) the threshold is
`BUILD_THRESHOLD`: a block that large is mapped on its own and unmapped when freed (a monorepo's build peaked 230 MB
lower; a folder built at once, 30% slower with it, is spared). Otherwise it is `SERVING_THRESHOLD`, where glibc's
own settles: a request's arrays of the repository's size (3 to 6 MB for 728,000 fragments) come from the arenas,
where mapping each afresh made retrieval 14 ms slower, and the language server's requests 30 ms slower while it
saved an edited index beside them. `malloc_trim` returns the free pages of every arena.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import logging
import threading
import time
from collections.abc import Iterator

logger = logging.getLogger(__name__)

TRIM_EVERY_S = 10.0  # a trim walks every arena (~1 ms, a few at most): callers that run per batch wait this long
BUILD_THRESHOLD = 1 << 20  # while building in batches: blocks this large are mapped apart, given back when freed
SERVING_THRESHOLD = 32 << 20  # otherwise (glibc's own ceiling; fixed, it no longer moves with what was freed)
_M_MMAP_THRESHOLD = -3  # mallopt's parameter (malloc.h)


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim, libc.mallopt  # noqa: B018 - glibc's
    except (OSError, AttributeError):  # not glibc (macOS, musl)
        return None
    return libc


_LIBC = _libc()
_TRIM = _LIBC.malloc_trim if _LIBC is not None else None
_building = 0  # builds and saves under way (a language server may run several)
_lock = threading.Lock()
if _LIBC is not None:
    _LIBC.mallopt(_M_MMAP_THRESHOLD, SERVING_THRESHOLD)


@contextlib.contextmanager
def large_blocks_given_back() -> Iterator[None]:
    """Blocks of `BUILD_THRESHOLD` and more are mapped apart while this is held (by any thread): a build."""
    global _building
    with _lock:
        _building += 1
        if _building == 1 and _LIBC is not None:
            _LIBC.mallopt(_M_MMAP_THRESHOLD, BUILD_THRESHOLD)
    try:
        yield
    finally:
        with _lock:
            _building -= 1
            if _building == 0 and _LIBC is not None:
                _LIBC.mallopt(_M_MMAP_THRESHOLD, SERVING_THRESHOLD)


_last_trim = 0.0


def trim(every_s: float = TRIM_EVERY_S, now: float | None = None) -> bool:
    """Return free heap pages to the system unless a trim ran less than `every_s` ago; whether a trim ran."""
    global _last_trim
    now = time.monotonic() if now is None else now
    if _TRIM is None or now - _last_trim < every_s:
        return False
    _last_trim = now
    started = time.perf_counter()
    _TRIM(0)
    logger.debug("malloc_trim took %.1f ms", (time.perf_counter() - started) * 1000)
    return True


@contextlib.contextmanager
def uncollected(collect: bool = False) -> Iterator[None]:
    """No cyclic collection while an index is saved or loaded, and what it made left out of later ones after
    (`gc.freeze`): a collector's pass over the objects a monorepo's index makes held the interpreter's lock 30 to
    450 ms at a time, eight times in a save, while the language server's requests waited, and made up half of a
    load (10.1 against 5.4 s). A save makes no reference cycles (a test holds it to that), so nothing kept out of
    the passes is garbage waiting for one; a load makes a few (numpy's array header parser: 671 objects in a
    monorepo's), which `collect` gathers in one pass before the freeze (250 ms there)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collect:
            gc.collect()
        gc.freeze()
        if enabled:
            gc.enable()


def settle() -> None:
    """Collect once, then keep what lives on (a loaded or built index) out of later passes (`gc.freeze`)."""
    gc.collect()
    gc.freeze()
