"""A real editor nobody here wrote: Emacs (Debian's emacs-nox 28 with elpa-eglot) configured with the documented
eglot snippet (lsp_bench/editors/eglot.el, shown in the docs); `completion-at-point` (eglot:
`textDocument/completion`) at the cursor inserts the repository's completion, and the edits before it, paused,
had the server prefetch that line (eglot sends no prefetch of its own). Never skipped: `bash .ci/setup` installs Emacs and eglot with apt.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from lsp_helpers import CHECKOUT, EXPECTED, copy_repo

from lsp_bench.nvim import editor_snippet

DRIVER = Path(__file__).resolve().parent / "editor" / "eglot_complete.el"


@pytest.mark.editor
@pytest.mark.slow
def test_eglot_completion_at_point_inserts_the_repository_completion(tmp_path: Path) -> None:
    emacs = shutil.which("emacs")
    if emacs is None:
        pytest.fail("Emacs is not installed: run `bash .ci/setup` (apt-get install -y emacs-nox elpa-eglot)")
    repo = copy_repo(tmp_path)
    subprocess.run(["git", "init", "-q", str(repo)], check=True, timeout=30)  # eglot's project root (project.el)
    file = repo / "shop" / "checkout.py"
    file.write_text(CHECKOUT + "\n")
    snippet = tmp_path / "snippet.el"
    snippet.write_text(editor_snippet("eglot.el"))
    bin_dir, log, out = tmp_path / "bin", tmp_path / "server.log", tmp_path / "line.txt"
    prefetches = tmp_path / "prefetches.txt"
    bin_dir.mkdir()  # `repocomp` on PATH, as the snippet expects, logging for this test
    (bin_dir / "repocomp").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m repocomp "$@" --log-file "{log}"\n')
    (bin_dir / "repocomp").chmod(0o755)
    env = dict(os.environ, SNIPPET=str(snippet), FILE=str(file), LINE=str(CHECKOUT.count("\n") + 1), OUT=str(out),
               PREFETCHES=str(prefetches), HOME=str(tmp_path), PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    proc = subprocess.run([emacs, "--batch", "-l", str(DRIVER)], env=env, cwd=repo, capture_output=True,
                          timeout=180)
    server_log = log.read_text(errors="replace") if log.exists() else "(no server log)"
    explain = f"{proc.stderr.decode(errors='replace')[-3000:]}\n--- server log ---\n{server_log[-3000:]}"
    assert out.exists(), explain
    assert out.read_text() == "    discounted_total = " + EXPECTED, explain
    assert prefetches.read_text() == "1", explain  # the pause after the space typed and deleted
