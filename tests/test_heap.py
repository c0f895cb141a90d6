"""The heap after the index's churn: large blocks given back when freed, and a trim that runs on glibc, at most
every `every_s` (TRIM_EVERY_S by default)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from repocomp.index import heap


def test_trims_on_glibc_then_waits_its_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heap, "_last_trim", 0.0)
    if platform.libc_ver()[0] != "glibc":
        assert heap.trim(now=1e6) is False  # nothing to call
        return
    assert heap.trim(now=1e6) is True
    assert heap.trim(now=1e6 + heap.TRIM_EVERY_S / 2) is False
    assert heap.trim(now=1e6 + heap.TRIM_EVERY_S) is True
    assert heap.trim(every_s=0, now=1e6 + heap.TRIM_EVERY_S) is True  # the refresh's catch-up: unlimited


_CHURN = r"""
import contextlib, numpy as np, sys
from repocomp.index import heap
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
with heap.large_blocks_given_back() if sys.argv[1] == "building" else contextlib.nullcontext():
    start = rss()
    blocks, pins = [], []
    for _ in range(24):
        blocks.append(np.ones(1 << 20))  # 8 MB
        pins.append(bytearray(1 << 18))  # a block after each (256 kB: from the top): the top cannot shrink past it
    del blocks
    print(rss() - start)
print(heap._building)
"""


@pytest.mark.skipif(heap._LIBC is None, reason="glibc's allocator only")
def test_large_blocks_are_given_back_when_freed_while_building_and_kept_in_the_arenas_otherwise():
    def grown(mode: str) -> tuple[float, int]:
        out = subprocess.run([sys.executable, "-c", _CHURN, mode], capture_output=True, text=True, timeout=120,
                             check=True)
        held, building = out.stdout.split()
        return float(held), int(building)

    held, _ = grown("serving")
    assert held > 150  # from the arenas: 192 MB freed, still resident (the next request's arrays reuse them)
    held, building = grown("building")
    assert held < 20 and building == 0  # mapped apart, unmapped when freed; then no build is said to be under way


def test_an_uncollected_stretch_runs_no_collector_and_keeps_what_it_made_out_of_later_passes() -> None:
    import gc

    gc.collect()
    frozen = gc.get_freeze_count()
    try:
        with heap.uncollected():
            assert not gc.isenabled()
            made = [[i] for i in range(1000)]
        assert gc.isenabled() and gc.get_freeze_count() >= frozen + len(made)
    finally:
        gc.unfreeze()
