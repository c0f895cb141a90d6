"""A real editor nobody here wrote: Neovim (headless, built-in LSP client) against `repocomp serve`.

Requests `textDocument/completion` through `vim.lsp.buf_request_sync` on the fixture repository and checks the
returned text. Needs `nvim` (Debian's 0.7.x is enough): `bash .ci/setup` installs it. Never skipped.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lsp_helpers import EXPECTED, copy_repo

SCRIPT = Path(__file__).resolve().parent / "editor" / "nvim_complete.lua"


@pytest.mark.editor
def test_neovim_builtin_client_gets_the_repository_completion(tmp_path: Path) -> None:
    nvim = shutil.which("nvim")
    if nvim is None:
        pytest.fail("Neovim (nvim) is not installed: run `bash .ci/setup` (it runs `apt-get install -y neovim`)")
    repo = copy_repo(tmp_path)
    out = tmp_path / "nvim_result.json"
    log = tmp_path / "server.log"
    env = dict(os.environ, REPO=str(repo), OUT=str(out), HOME=str(tmp_path), XDG_STATE_HOME=str(tmp_path / "state"),
               SERVER_CMD=json.dumps([sys.executable, "-m", "repocomp", "serve", "--log-file", str(log)]))
    proc = subprocess.run([nvim, "--headless", "-u", "NONE", "-i", "NONE", "-c", f"luafile {SCRIPT}"],
                          env=env, cwd=tmp_path, capture_output=True, timeout=180)
    server_log = log.read_text(errors="replace") if log.exists() else "(no server log)"
    assert out.exists(), f"nvim wrote no result (rc={proc.returncode}): {proc.stderr.decode(errors='replace')}\n{server_log}"
    result = json.loads(out.read_text())
    assert result.get("error") in (None, ""), f"{result['error']}\n{server_log}"
    assert result["ready"] is True, server_log
    completion = result["completion"]
    items = completion["items"] if isinstance(completion, dict) else completion
    assert len(items) == 1, completion
    edit = items[0]["textEdit"]
    assert edit["newText"].startswith(EXPECTED), edit
    # the range replaces nothing before the cursor (no word prefix typed): start == end == cursor
    cursor = {"line": 5, "character": len("    discounted_total = ")}
    assert edit["range"] == {"start": cursor, "end": cursor}
