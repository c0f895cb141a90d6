"""The index on disk: one versioned file, written atomically.

Layout: a magic line, a format-version line, then a pickle of the index state. The file is written to a temporary
name in the same folder, fsynced, then renamed over the old one, so a crash mid-write leaves the previous index
loadable. Anything unreadable raises `IndexCorruptError`, never a raw traceback.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from pathlib import Path
from typing import Any

from repocomp.errors import IndexCorruptError

MAGIC = b"repocomp-index\n"
FORMAT_VERSION = 1
INDEX_FILE = "index.bin"


def write_state(folder: Path, state: dict[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / INDEX_FILE
    fd, tmp = tempfile.mkstemp(prefix=".index-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(MAGIC)
            fh.write(f"{FORMAT_VERSION}\n".encode())
            pickle.dump(state, fh, protocol=pickle.HIGHEST_PROTOCOL)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def read_state(folder: Path) -> dict[str, Any]:
    target = folder / INDEX_FILE
    if not target.is_file():
        raise IndexCorruptError(f"no index at {folder}: run `repocomp index <repo>` to build one")
    try:
        with target.open("rb") as fh:
            if fh.readline() != MAGIC:
                raise IndexCorruptError(f"{target} is not a repocomp index; delete it or run `repocomp index` to rebuild")
            version = fh.readline().strip()
            if version != str(FORMAT_VERSION).encode():
                raise IndexCorruptError(
                    f"{target} has format version {version.decode(errors='replace')!r}, this repocomp reads "
                    f"{FORMAT_VERSION}; run `repocomp index` to rebuild it")
            state = pickle.load(fh)
    except IndexCorruptError:
        raise
    except Exception as exc:  # truncated or garbled pickle: any error class is possible
        raise IndexCorruptError(f"{target} is corrupt ({type(exc).__name__}); run `repocomp index` to rebuild it") from None
    if not isinstance(state, dict):
        raise IndexCorruptError(f"{target} is corrupt; run `repocomp index` to rebuild it")
    return state
