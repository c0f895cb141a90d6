"""The server's memory figures: the resident set, and the part of it that is pages of files read in place."""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np

from lsp_server.stats import file_rss_bytes, rss_bytes


def test_pages_of_a_mapped_file_read_count_as_file_pages_of_the_resident_set(tmp_path: Path) -> None:
    path = tmp_path / "data.bin"
    size = 64 << 20
    path.write_bytes(np.arange(size // 8, dtype=np.int64).tobytes())
    before, before_all = file_rss_bytes(), rss_bytes()
    with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        view = np.frombuffer(mapped, np.int64)
        assert int(view.sum()) == (size // 8) * (size // 8 - 1) // 2  # every page read
        grown = file_rss_bytes() - before
        assert 0.9 * size <= grown <= 1.1 * size + (8 << 20)
        assert rss_bytes() - before_all >= 0.9 * size  # within the resident set
        del view
