"""What makes a stored index the repository's own: its stored root is the repository's, and every path it stores
names a place inside the repository.

A repository can ship any `.repocomp/index.bin`: one copied from another project (its code would be offered as
completions), or one whose paths read `../outside.py` or `/etc/x` (a later update keyed by them failed with a
KeyError, and a read from disk by them would leave the root). `check_stored` runs before anything of the file is
decoded; the file's own kind (a regular file, not a symbolic link) is checked where it is opened
(`repocomp.index.store.read_state`). Either failure is an `IndexUntrustedError`: `Index.open` sets the file aside and
rebuilds.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

from repocomp.errors import IndexUntrustedError


def check_stored(meta: dict[str, Any], root: Path, target: Path) -> None:
    """`IndexUntrustedError` naming `target` unless `meta` was written for `root` (resolved) and each stored path
    is a plain relative path that stays inside `root`, through the folders and links on disk as they are now."""
    stored_root = meta.get("root")
    if stored_root != str(root):
        shown = stored_root if isinstance(stored_root, str) else type(stored_root).__name__
        raise IndexUntrustedError(f"{target} was built for another folder ({_printable(shown)}), not {root}", target)
    try:
        files = [rec["path"] for rec in meta["files"]]
        consulted = list(meta.get("consulted", {}))
        folders = [entry[0] for entry in meta["graph"]["dirs"]]
    except (KeyError, TypeError, IndexError):
        return  # the layout is the codec's to reject (as corrupt); only paths are judged here
    for path in _bad_paths(files, consulted, folders):
        raise IndexUntrustedError(f"{target} holds the path {_printable(path)}, which is not inside {root}", target)
    if len(set(files)) != len(files) or not set(consulted) <= set(files):
        raise IndexUntrustedError(f"{target} names files inconsistently (a path twice, or an unknown one)", target)
    for path in _leaving(files, root):
        raise IndexUntrustedError(f"{target} holds the path {_printable(path)}, which leads out of {root} "
                                  "through a symbolic link", target)


def plain_relative(path: Any, allow_empty: bool = False) -> bool:
    """A relative POSIX path in the walk's own spelling: no `/` first or last, no `.`, `..` or empty part, no
    control character (the walk skips such names)."""
    if not isinstance(path, str):
        return False
    if path == "":
        return allow_empty
    if any(ord(c) < 32 or ord(c) == 127 for c in path):
        return False
    parts = path.split("/")
    return all(part not in ("", ".", "..") for part in parts) and not PurePosixPath(path).is_absolute()


def _bad_paths(files: list[Any], consulted: list[Any], folders: list[Any]) -> Iterator[Any]:
    yield from (p for p in files + consulted if not plain_relative(p))
    yield from (f for f in folders if not plain_relative(f, allow_empty=True))  # "" is the root's own folder


def _leaving(files: list[str], root: Path) -> Iterator[str]:
    """Stored paths that lead out of `root` on disk: through a folder that is a link leading out, or being such a
    link themselves. Each folder is resolved once (a repository has far fewer folders than files)."""
    inside: dict[str, bool] = {}
    for path in files:
        folder, _, _ = path.rpartition("/")
        if folder not in inside:
            inside[folder] = _resolves_inside(root / folder, root)
        full = root / path
        if not inside[folder] or (os.path.islink(full) and not _resolves_inside(full, root)):
            yield path


def _resolves_inside(path: Path, root: Path) -> bool:
    try:
        return path.resolve().is_relative_to(root)
    except (OSError, RuntimeError):  # a symlink loop (RuntimeError before Python 3.13): leads nowhere inside
        return False


def _printable(text: str, limit: int = 120) -> str:
    """`text` for a one-line message: control characters escaped, long ones cut."""
    shown = text[:limit].encode("unicode_escape").decode("ascii")
    return f"'{shown}{'...' if len(text) > limit else ''}'"
