"""Repository walking: which files get indexed (`FileRule`, the one rule), and why the others were skipped.

Respects `.gitignore` files (root and nested, via pathspec), skips `.git` and the index folder, binary files
(NUL bytes), files over the size limit, unreadable files, symlinks that loop or leave the repository (a file is
read only when its real path is inside the root), FIFOs, devices and sockets (never opened: a FIFO would block
the reader forever) and names with control characters (a newline in a path cannot be addressed as FILE:LINE
and would break the lines of a prompt). Non-UTF-8 files are decoded with replacement characters and reported.
Nothing here stops the run.
"""

from __future__ import annotations

import logging
import os
import stat
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pathspec

from graph.languages import language_for
from repocomp.config import Config
from repocomp.errors import RepocompError

log = logging.getLogger(__name__)

_ALWAYS_SKIPPED_DIRS = {".git", ".hg", ".svn", "__pycache__", "node_modules", ".venv", ".tox", ".mypy_cache"}


@dataclass
class SourceFile:
    path: str  # relative, POSIX
    language: str
    text: str


@dataclass
class WalkResult:
    files: list[SourceFile] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)  # reason -> count
    notes: list[str] = field(default_factory=list)  # "path: reason" for the reported ones (non-UTF-8, ...)


def addressable(rel: str) -> bool:
    """A path without control characters (a newline in a name breaks FILE:LINE, prompts and result lines)."""
    return not any(ord(c) < 0x20 or ord(c) == 0x7F for c in rel)


def read_regular(path: Path, max_bytes: int) -> tuple[bytes | None, str | None]:
    """The bytes of a regular file: (data, None), or (None, "not_regular" | "too_large" | "unreadable").

    Checks the file type before opening (a FIFO would block `open` forever, a device may act on it), opens
    without blocking, and checks again on the open descriptor in case the file was swapped in between.
    """
    try:
        st = os.stat(path)
    except OSError:
        return None, "unreadable"
    if not stat.S_ISREG(st.st_mode):
        return None, "not_regular"
    if st.st_size > max_bytes:
        return None, "too_large"
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError:
        return None, "unreadable"
    try:
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                return None, "not_regular"
            data = fh.read(max_bytes + 1)  # a file that grew since the stat stays bounded
    except OSError:
        return None, "unreadable"
    return (None, "too_large") if len(data) > max_bytes else (data, None)


def decode_source(data: bytes) -> tuple[str, str | None]:
    """UTF-8 text, or the text with replacement characters and the reason "non_utf8_replaced"."""
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError:
        return data.decode("utf-8", errors="replace"), "non_utf8_replaced"


def read_text_file(path: Path, max_bytes: int) -> str:
    """A file's text as the indexer reads it (non-UTF-8 bytes replaced); `RepocompError` saying why not."""
    data, reason = read_regular(path, max_bytes)
    if data is None:
        why = {"not_regular": "is not a regular file (a FIFO, device or socket is never read)",
               "too_large": f"is larger than {max_bytes} bytes ([index] max_file_bytes)",
               }.get(reason or "", "cannot be read")
        raise RepocompError(f"{path} {why}")
    return decode_source(data)[0]


def _gitignore(dirpath: Path) -> pathspec.PathSpec | None:
    """The folder's .gitignore (its patterns are relative to the folder)."""
    data, _ = read_regular(dirpath / ".gitignore", 1 << 20)
    if data is None:
        return None
    return pathspec.GitIgnoreSpec.from_lines(data.decode("utf-8", errors="replace").splitlines())


class FileRule:
    """Which files the index holds: the one rule for the build's walk, incremental updates (editor saves, the
    language server's watcher), the task maker and the benches, so an update never indexes what a build skips.

    By name: `[index] exclude`, every `.gitignore` from the root down, the always-skipped folders (`.git`,
    `node_modules`, ...), the index folder, the configured languages, an addressable name. By content (a file on
    disk or an editor's buffer): the real path inside the root, a regular file, the size limit, no NUL byte.
    `.gitignore` files are read once per instance: make a fresh one when they may have changed.
    """

    def __init__(self, root: Path, config: Config, index_dir: Path | None = None) -> None:
        self.root = root.resolve()
        self.config = config
        self.index_dir = index_dir if index_dir is not None else self.root / config.index.dir
        self._specs: dict[str, pathspec.PathSpec | None] = {}  # folder -> its .gitignore (read once)
        self._exclude = pathspec.GitIgnoreSpec.from_lines(config.index.exclude) if config.index.exclude else None

    def source(self, rel: str, text: str | None = None) -> tuple[SourceFile | None, str | None]:
        """`rel` (POSIX, relative to the root) as the index holds it, from disk or from an editor's `text`:
        (file, None), or (None or the decoded file, why it is left out or noted)."""
        if self._path_ignored(rel):
            return None, "ignored"
        return self.read(rel, text)

    def ignored(self, rel: str, is_dir: bool) -> bool:
        """`rel` is ignored by name; its parent folders are not checked (the walk prunes them as it goes)."""
        suffix = "/" if is_dir else ""
        if is_dir and (rel.rpartition("/")[2] in _ALWAYS_SKIPPED_DIRS or self.root / rel == self.index_dir):
            return True
        if self._exclude is not None and self._exclude.match_file(rel + suffix):
            return True
        parts = rel.split("/")
        for depth in range(len(parts)):  # the .gitignore of every folder above, each relative to its folder
            spec = self._gitignore_of("/".join(parts[:depth]))
            if spec is not None and spec.match_file("/".join(parts[depth:]) + suffix):
                return True
        return False

    def read(self, rel: str, text: str | None = None) -> tuple[SourceFile | None, str | None]:
        """`source` for a path whose folders and name were found not ignored (by the walk)."""
        language = self._language(rel)
        if language is None:
            return None, "unsupported"
        if not addressable(rel):
            return None, "bad_name"
        real = Path(os.path.realpath(self.root / rel))
        if not real.is_relative_to(self.root):  # a symlink out of the repository: never read, never indexed
            return None, "symlink_outside"
        note = None
        if text is None:
            data, reason = read_regular(real, self.config.index.max_file_bytes)
            if data is None:
                return None, reason
            text, note = decode_source(data)
        elif len(text.encode("utf-8", "surrogatepass")) > self.config.index.max_file_bytes:
            return None, "too_large"  # a buffer is held to the limit of the file it will be saved as
        if "\x00" in text:
            return None, "binary"
        return SourceFile(rel, language, text), note

    def _language(self, rel: str) -> str | None:
        """The file's language when the index takes it (`[index] languages`), else None."""
        language = language_for(rel)
        return language if language in self.config.index.languages else None

    def _path_ignored(self, rel: str) -> bool:
        """`rel` or one of its folders is ignored: what the walk never reaches."""
        parts = rel.split("/")
        return any(self.ignored("/".join(parts[:i]), True) for i in range(1, len(parts))) or self.ignored(rel, False)

    def _gitignore_of(self, rel_dir: str) -> pathspec.PathSpec | None:
        if rel_dir not in self._specs:
            self._specs[rel_dir] = _gitignore(self.root / rel_dir if rel_dir else self.root)
        return self._specs[rel_dir]


def walk_repository(root: Path, config: Config, index_dir: Path | None = None) -> WalkResult:
    """The files the index holds (`FileRule`), with counts and notes of the ones left out."""
    root = root.resolve()
    result = WalkResult()
    rules = FileRule(root, config, index_dir)
    seen_dirs: set[tuple[int, int]] = set()

    for dirpath, dirnames, filenames in os.walk(root, followlinks=True, onerror=lambda e: result.skipped.update(["unreadable"])):
        here = Path(dirpath)
        rel_dir = here.relative_to(root).as_posix() if here != root else ""
        try:
            st = here.stat()
        except OSError:
            dirnames[:] = []
            continue
        if (st.st_dev, st.st_ino) in seen_dirs:  # a symlink back into the tree
            result.skipped["symlink_loop"] += 1
            result.notes.append(f"{rel_dir or '.'}: symlink loop")
            dirnames[:] = []
            continue
        seen_dirs.add((st.st_dev, st.st_ino))
        kept = []
        for name in sorted(dirnames):
            rel = f"{rel_dir}/{name}" if rel_dir else name
            full = here / name
            if rules.ignored(rel, True):
                continue
            if full.is_symlink():
                try:
                    target = full.resolve(strict=True)
                except (OSError, RuntimeError):
                    result.skipped["symlink_loop"] += 1
                    result.notes.append(f"{rel}: broken or looping symlink")
                    continue
                if not target.is_relative_to(root):
                    result.skipped["symlink_outside"] += 1
                    continue
            kept.append(name)
        dirnames[:] = kept
        for name in sorted(filenames):
            rel = f"{rel_dir}/{name}" if rel_dir else name
            if rules.ignored(rel, False):
                continue
            source, reason = rules.read(rel)
            if reason == "unsupported":
                continue
            if reason is not None:
                result.skipped[reason] += 1  # non-UTF-8 files are still indexed, but counted and named
                shown = rel if addressable(rel) else repr(rel)
                result.notes.append(f"{shown}: {reason.replace('_', ' ')}")
                log.info("%s: %s", shown, reason)
            if source is not None:
                result.files.append(source)
    return result
