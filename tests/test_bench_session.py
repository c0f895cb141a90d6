"""`repocomp bench session` on the fixture repository, through the real server: a short session leaves no
handler future behind, and the background refresh catches up (the long runs' figures are in the README)."""

from __future__ import annotations

from lsp_helpers import FIXTURE_REPO

from lsp_bench.long_session import format_table, run_session


async def test_a_short_session_keeps_no_handler_future_and_catches_up() -> None:
    result = await run_session(FIXTURE_REPO, keys=150, sample=50, ready_timeout=120, catch_up_timeout=60)
    assert result.keys == 150
    assert [s["keys"] for s in result.samples] == [0, 50, 100, 150, 150]
    # pygls kept one future per notification (a keystroke each) until the protocol forgot finished ones
    assert [s["handlers"] for s in result.samples] == [0] * 5
    last = result.samples[-1]
    assert last["stale"] == 0 and last["nodes_alive"] <= last["nodes"]
    assert 0 < result.typing_p50_ms <= result.typing_p95_ms <= result.typing_max_ms
    assert "150 keystrokes" in format_table(result)
