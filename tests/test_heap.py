"""The heap trim after the index's churn: runs on glibc, at most every `every_s` (TRIM_EVERY_S by default)."""

from __future__ import annotations

import platform

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
