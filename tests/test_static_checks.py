"""The code stays lint-clean (ruff) and type-clean (mypy), with the settings in pyproject.toml.

Both run as CI runs them: `python -m ruff check .` and `python -m mypy` (its `files` and options come from
`[tool.mypy]`) from the repository root, with the interpreter running the tests (the test extra installs both).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)


@pytest.mark.slow
def test_ruff_is_clean() -> None:
    done = _run("ruff", "check", ".", timeout_s=120)
    assert done.returncode == 0, f"ruff check . failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"


@pytest.mark.slow
def test_mypy_is_clean() -> None:
    done = _run("mypy", timeout_s=600)  # a cold cache checks every module: about 30 s on 2 cores
    assert done.returncode == 0, f"mypy failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
