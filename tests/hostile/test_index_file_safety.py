"""Issue 9, item 1 and the index-file cases of the one-line-error list: an index file shipped by a repository
runs no code, a killed write leaves nothing behind, odd index folders and read-only repositories give one line.

The real CLI runs as a subprocess on small repositories in tmp_path, each wait bounded.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from cli_run import assert_one_line, cli, pickled_index, python, repocomp

from repocomp.index.store import FORMAT_VERSION, INDEX_FILE, MAGIC, read_state

CURRENT = str(FORMAT_VERSION).encode()  # a pickle in the current format's file: damaged, not stale


@pytest.mark.parametrize("version", [b"1", CURRENT])
def test_planted_pickle_in_index_file_runs_nothing(repo: Path, tmp_path: Path, version: bytes) -> None:
    marker = tmp_path / "PWNED"
    index_file = repo / ".repocomp" / INDEX_FILE
    index_file.parent.mkdir()
    index_file.write_bytes(pickled_index(marker, version))

    done = repocomp(tmp_path, "complete", f"{repo / 'shapes.py'}:5", "--backend", "extractive")
    assert not marker.exists(), "the planted index ran code on `repocomp complete`"
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    # rebuilt, and said in one line: a warning for the damaged format-2 file, the build notice for the format-1
    # one (another version is stale, rebuilt without a warning)
    assert ("rebuild" if version == CURRENT else "building it") in done.stderr, done.stderr

    index_file.write_bytes(pickled_index(marker, version))
    opened = python(tmp_path, f"from repocomp.index import Index; print(len(Index.open({str(repo)!r}).files))")
    assert not marker.exists(), "the planted index ran code on Index.open"
    assert opened.returncode == 0 and opened.stdout.split() == ["1"], opened.stderr
    meta, arrays = read_state(index_file.parent)  # rebuilt in the current format
    assert [f["path"] for f in meta["files"]] == ["shapes.py"]


def test_killed_index_write_leaves_no_tmp_file_behind(repo: Path, tmp_path: Path) -> None:
    folder = repo / ".repocomp"
    folder.mkdir()
    dead = folder / ".index-killed.tmp"  # what a write killed an hour ago left
    dead.write_bytes(MAGIC + b"2\n" + b"half an index")
    hour_ago = time.time() - 3600
    os.utime(dead, (hour_ago, hour_ago))
    live = folder / ".index-live.tmp"  # a write in progress elsewhere right now: not ours to delete
    live.write_bytes(b"being written")

    done = repocomp(tmp_path, "index", str(repo))
    assert done.returncode == 0, done.stderr
    assert not dead.exists() and live.exists()
    assert sorted(p.name for p in folder.iterdir()) == [".index-live.tmp", INDEX_FILE]


def test_index_folder_that_is_a_file_and_index_file_that_is_a_folder_give_one_line(
        repo: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (repo / ".repocomp").write_text("not a folder\n")
    assert_one_line(*cli(capsys, "index", str(repo))[::2], ".repocomp", "is a file")
    done = repocomp(tmp_path, "complete", f"{repo / 'shapes.py'}:5", "--backend", "extractive")
    assert done.returncode == 0 and "Traceback" not in done.stderr and "in memory" in done.stderr, done.stderr

    (repo / ".repocomp").unlink()
    (repo / ".repocomp" / INDEX_FILE).mkdir(parents=True)
    assert_one_line(*cli(capsys, "index", str(repo))[::2], INDEX_FILE, "not a regular file")
    done = repocomp(tmp_path, "complete", f"{repo / 'shapes.py'}:5", "--backend", "extractive")
    assert done.returncode == 0 and "Traceback" not in done.stderr and "in memory" in done.stderr, done.stderr


# Root ignores file modes through CAP_DAC_OVERRIDE (and DAC_READ_SEARCH): as root, the CLI runs without them, so a
# 0555 folder is read-only to it as to any user. (Not another uid: the interpreter may live under /root, and
# `chattr +i` needs a file system and a capability CI may not have.)
AS_ORDINARY_USER = (("setpriv", "--bounding-set=-dac_override,-dac_read_search") if os.geteuid() == 0 else ())


def test_read_only_repository_is_indexed_into_the_user_cache(repo: Path, tmp_path: Path) -> None:
    repo.chmod(0o555)
    try:
        indexed = repocomp(tmp_path, "index", str(repo), prefix=AS_ORDINARY_USER)
        assert indexed.returncode == 0 and "Traceback" not in indexed.stderr, indexed.stderr
        cache = tmp_path / "cache" / "repocomp" / "indexes"
        assert str(cache) in indexed.stderr  # said where it went instead
        (stored,) = cache.glob(f"*/{INDEX_FILE}")
        done = repocomp(tmp_path, "complete", f"{repo / 'shapes.py'}:5", "--backend", "extractive",
                        prefix=AS_ORDINARY_USER)
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
        assert "building it" not in done.stderr  # the cached index was found and used
        assert not (repo / ".repocomp").exists()
    finally:
        repo.chmod(0o755)
