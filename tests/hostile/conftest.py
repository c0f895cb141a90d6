"""Fixtures shared by the hostile-input tests."""

from __future__ import annotations

from pathlib import Path

import pytest

SOURCE = "def area(width, height):\n    return width * height\n\n\ntotal = area(2, 3)\n"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A one-file repository (a `.git` folder marks its root)."""
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    (root / "shapes.py").write_text(SOURCE)
    return root
