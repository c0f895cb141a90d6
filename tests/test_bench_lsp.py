"""`repocomp bench lsp` end to end on the LSP fixture, the server a real one over stdio: every phase gives its
figures, and the index saved after the save rounds is timed against the requests that overlapped it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from lsp_helpers import copy_repo

from lsp_bench.bench import format_table, run_bench, tail_stages

pytestmark = pytest.mark.slow


def test_every_phase_is_measured_and_a_save_is_timed_against_the_requests_around_it(tmp_path: Path) -> None:
    repo = copy_repo(tmp_path)
    result = asyncio.run(run_bench(repo, requests=10, typing_sites=2, keys=2, cancel_rounds=2, save_rounds=2,
                                   ready_timeout=120, save_after_ms=500, save_wait_s=60))
    # 2 sites, 2 keys, a pause, 2 more keys each
    assert result.requests == 10 + 2 * 2 * 2 and result.inline_p95_ms > 0 and result.cancel_p95_ms > 0
    # the typing requests but the first at each site, and the first after each pause
    assert 0 < result.inline_typed_on_p50_ms <= result.inline_typed_on_p95_ms
    assert 0 < result.inline_resumed_p50_ms <= result.inline_resumed_max_ms
    assert "but the first key at each site" in format_table(result) and "after a pause" in format_table(result)
    assert result.save_visible_p95_ms > 0 and result.rss_mb > 30
    # the server saved the changed index while requests ran one after another: the save found, its longest hold
    # of the write lock measured, each request timed as overlapping it or not (this repository's save takes a
    # few ms: it may fall between two requests; the monorepo's overlapped 51-59 of them)
    assert result.index_save_s > 0 and 0 <= result.index_save_held_ms < 10_000, result
    assert 0 <= result.index_save_overlap_ms < result.index_save_s * 1000, result  # the slices' longest overlap
    assert result.beside_save_p50_ms > 0 or result.during_save >= 1, result
    assert result.during_save == 0 or result.during_save_p50_ms <= result.during_save_p95_ms \
        <= result.during_save_max_ms < 10_000
    assert not result.beside_save_p50_ms > 0 or \
        result.beside_save_p50_ms <= result.beside_save_p95_ms <= result.beside_save_max_ms
    assert "requests during an index save" in format_table(result)
    # where the slowest typing requests' time went: the pipeline's stages, and the time outside them
    assert {"total", "outside"} <= result.typing_tail_ms.keys() and result.typing_tail_ms["total"] > 0


def test_the_typing_tail_is_the_slowest_requests_stage_by_stage() -> None:
    completed = [10.0] * 9 + [100.0]
    stages = [{"total": 9.0, "retrieve_1": 5.0}] * 9 + [{"total": 40.0, "retrieve_1": 30.0}]
    assert tail_stages(completed, stages) == {"outside": 60.0, "total": 40.0, "retrieve_1": 30.0}
