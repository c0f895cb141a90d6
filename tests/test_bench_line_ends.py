"""`repocomp bench line-ends` picks code lines of a file the same way every time (the Neovim run itself is the
benchmark), and runs end to end in Neovim 0.12."""

from __future__ import annotations

from pathlib import Path

import pytest
from lsp_helpers import copy_repo

from lsp_bench.line_ends import format_table, pick_lines, run_line_ends
from lsp_bench.slow_backend import SlowBackend

SOURCE = '''"""Docstring."""
# a comment
import os


def f(x):
    // not python, but a comment form the picker skips too
    return os.path.join(x, "a")

'''


def test_only_code_lines_before_the_last_one_are_picked() -> None:
    assert pick_lines(SOURCE, 30, seed=0) == [1, 3, 6]  # not blank, not a comment, not the last code line (8)


def test_the_pick_is_seeded_and_sorted() -> None:
    text = "\n".join(f"x{i} = {i}" for i in range(200))
    first, again, other = pick_lines(text, 30, 1), pick_lines(text, 30, 1), pick_lines(text, 30, 2)
    assert first == again == sorted(first) and len(first) == 30 and first != other
    assert 200 not in first  # the last line has no next line to offer


@pytest.mark.editor
@pytest.mark.slow
@pytest.mark.parametrize("editor_prefetch", [True, False])
def test_emptied_lines_are_answered_in_neovim_and_the_servers_memory_is_read(tmp_path: Path,
                                                                              editor_prefetch: bool) -> None:
    """The bench end to end, the model an oracle endpoint (it answers what the file says): Neovim empties two lines
    in turn, the cursor rests on the line above, each gets the line back as ghost text, and the run ends with the
    server's resident set (and its file pages) from `repocomp/stats`. The snippet prefetches where the cursor
    rests; without its prefetch, the server prefetches where the emptying edit paused."""
    repo = copy_repo(tmp_path)
    file = repo / "shop" / "cart.py"
    slow = SlowBackend(file.read_text(), latency_s=0.2)
    user = tmp_path / "user.toml"
    (repo / "repocomp.toml").write_text("")  # the snippet's root marker
    try:
        user.write_text(f'[backend]\nname = "vllm"\nmodel = "slow"\nfallback = ""\n'
                        f'[backend.vllm]\nendpoints = ["{slow.start()}"]\n[retrieval]\niterations = 1\n')
        result = run_line_ends(repo, file, n=2, ghost_ms=20_000, emptied=True, config_file=user, rest_ms=1000,
                               editor_prefetch=editor_prefetch)
    finally:
        slow.stop()
    assert result.error is None and len(result.lines) == 2 and result.next_line_right == 2, result
    rested = sum(line > 1 for line in result.lines)  # the first line has no line above to rest on
    assert result.prefetches >= rested and (result.prefetches_after_edits == 0 if editor_prefetch
                                                 else result.prefetches_after_edits >= rested), result
    assert 30 < result.server_rss_mb < 2_000 and 0 < result.server_file_rss_mb < result.server_rss_mb, result
    assert "the server's RSS at the end" in format_table(result)
