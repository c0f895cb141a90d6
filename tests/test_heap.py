"""The heap after the index's churn: large blocks given back when freed, and a trim that runs on glibc, at most
every `every_s` (TRIM_EVERY_S by default)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from repocomp import heap


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
import numpy as np, sys
if sys.argv[1] == "heap":
    import repocomp.heap
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
np.ones(2 << 20)  # a 16 MB block mapped and freed: glibc's own rule then keeps blocks up to 16 MB in its arenas
start = rss()
blocks, pins = [], []
for _ in range(24):
    blocks.append(np.ones(1 << 20))  # 8 MB
    pins.append(bytearray(1 << 18))  # a block after each (256 kB: from the top): the top cannot shrink past it
del blocks
print(rss() - start)
"""


@pytest.mark.skipif(heap._LIBC is None, reason="glibc's allocator only")
def test_large_blocks_are_given_back_when_freed_not_kept_in_the_arenas():
    def grown(mode: str) -> float:
        out = subprocess.run([sys.executable, "-c", _CHURN, mode], capture_output=True, text=True, timeout=120,
                             check=True)
        return float(out.stdout)

    assert grown("plain") > 150  # glibc's own threshold: 192 MB freed, still resident
    assert grown("heap") < 20  # with the module's threshold: mapped apart, unmapped when freed
