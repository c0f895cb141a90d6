"""Helpers for the hostile-input tests: run the real `repocomp` CLI as a subprocess, bounded, isolated; and the
hostile inputs more than one test plants (a pickled index file, a minified line).

Every run gets its own user cache and config folders (`XDG_CACHE_HOME`, `XDG_CONFIG_HOME` under `home`), so
nothing the machine's user configured leaks in and nothing a test writes leaks out.
"""

from __future__ import annotations

import os
import pickle
import socket
import subprocess
import sys
import threading
from pathlib import Path

from repocomp.index.store import MAGIC

REPO_ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = float(os.environ.get("REPOCOMP_TEST_TIMEOUT_S", "60"))  # generous for busy cores; a hang still fails


def user_env(home: Path) -> dict[str, str]:
    return {**os.environ, "XDG_CACHE_HOME": str(home / "cache"), "XDG_CONFIG_HOME": str(home / "config"),
            "PYTHONPATH": str(REPO_ROOT)}


def repocomp(home: Path, *args: str, timeout: float = TIMEOUT_S,
             prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """`python -m repocomp ARGS` from the working tree; raises `TimeoutExpired` past `timeout` (a hang).
    `prefix` runs it under a wrapper command (e.g. `setpriv ...`)."""
    return subprocess.run([*prefix, sys.executable, "-m", "repocomp", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO_ROOT, env=user_env(home))


def python(home: Path, code: str, timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """`python -c CODE` with the working tree importable (for the library entry points, e.g. `Index.open`)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                          cwd=REPO_ROOT, env=user_env(home))


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Exit status 2, no traceback, and a last line `repocomp: error: ...` holding every needle."""
    assert "Traceback" not in proc.stderr, proc.stderr
    last = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""
    assert proc.returncode == 2 and last.startswith("repocomp: error: "), (proc.returncode, proc.stderr)
    for needle in needles:
        assert needle in last, (needle, last)
    return last


class TcpSink:
    """A loopback TCP endpoint that accepts connections and never answers (a stalled or silent backend).

    `connections` counts who came; `close()` stops it. Runs in a thread, so a subprocess can be pointed at it.
    """

    def __init__(self) -> None:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self.connections = 0
        self._held: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self.connections += 1
            self._held.append(conn)  # held open, never answered

    def close(self) -> None:
        self._closed = True
        self._sock.close()
        for conn in self._held:
            conn.close()


def cli(capsys, *args: str) -> tuple[int, str, str]:
    """The CLI in this process (`repocomp.cli.main`), for cases with no hang or code execution at stake:
    (exit status, stdout, stderr). An uncaught exception (a traceback) fails the calling test."""
    from repocomp.cli import main

    status = main(list(args))
    out, err = capsys.readouterr()
    return status, out, err


def assert_one_line(status: int, err: str, *needles: str) -> str:
    """In-process twin of `assert_one_line_error`."""
    last = err.strip().splitlines()[-1] if err.strip() else ""
    assert status == 2 and last.startswith("repocomp: error: "), (status, err)
    for needle in needles:
        assert needle in last, (needle, last)
    return last


class _Payload:
    """Unpickling this runs `touch MARKER`: what a hostile repository would ship as its index."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def pickled_index(marker: Path, version: bytes) -> bytes:
    """An index file (magic line, version line, then a pickle) whose unpickling creates `marker`."""
    return MAGIC + version + b"\n" + pickle.dumps({"state": _Payload(marker)})


def minified_line(size: int) -> str:
    """One line of minified-looking JavaScript, `size` characters long."""
    parts, n, i = [], 0, 0
    while n < size:
        parts.append(f"var a{i}=function(b,c){{return b*{i}+c.x{i}(b)}};")
        n += len(parts[-1])
        i += 1
    return "".join(parts)[:size]
