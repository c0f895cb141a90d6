"""Fixtures shared by the hostile-input tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

SOURCE = "def area(width, height):\n    return width * height\n\n\ntotal = area(2, 3)\n"


@pytest.fixture(scope="session", autouse=True)
def compiled_kernels(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Index a small repository once before any test here, so that numba's on-disk cache holds the index's kernels.

    The tests bound an index's or a completion's CPU time by about three times its warm figure; on a fresh checkout
    the first index also compiles the kernels (7-12 s of CPU on a 2-core machine), which is not what they measure."""
    root = tmp_path_factory.mktemp("kernels")
    (root / ".git").mkdir()
    (root / "shapes.py").write_text(SOURCE + "".join(f"# row {i}\nT{i} = area({i}, {i})\n" for i in range(400)))
    (root / "util.js").write_text("function helper(x) {\n  return x + 1;\n}\n")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "XDG_CACHE_HOME": str(root / ".cache")}
    proc = subprocess.run([sys.executable, "-m", "repocomp", "index", "."], cwd=root, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A one-file repository (a `.git` folder marks its root)."""
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    (root / "shapes.py").write_text(SOURCE)
    return root
