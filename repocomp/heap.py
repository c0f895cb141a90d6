"""Handing freed heap memory back to the system after the index's churn and a walk's texts (glibc; elsewhere a
no-op).

Each keystroke's index update allocates and frees numpy temporaries from the worker thread; glibc keeps freed
memory in its arenas (after the first large free it raises its mmap threshold, so later large blocks come from the
arenas too), and an editing session's RSS grows although its live data does not. `malloc_trim` returns the free
pages of every arena.
"""

from __future__ import annotations

import ctypes
import logging
import time

logger = logging.getLogger(__name__)

TRIM_EVERY_S = 10.0  # a trim walks every arena (~1 ms, a few at most): callers that run per batch wait this long


def _malloc_trim() -> ctypes._NamedFuncPointer | None:
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc (macOS, musl)
        return None


_TRIM = _malloc_trim()
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
