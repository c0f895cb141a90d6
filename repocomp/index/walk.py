"""Repository walking: which files get indexed (`FileRule`, the one rule), and why the others were skipped.

Respects `.gitignore` files (root and nested) and `[index] exclude` (`repocomp.index.ignore`: a matcher whose cost is
bounded, with a bounded number of patterns), skips `.git` and the index folder, binary files (NUL bytes), files
over the size limit, unreadable files, symlinks that loop or leave the repository (a file is read only when its
real path is inside the root), FIFOs, devices and sockets (never opened: a FIFO would block the reader forever),
names with control characters (a newline in a path cannot be addressed as FILE:LINE and would break the lines of
a prompt) and folders on another file system than the root (`/proc` and `/sys` when the root is `/`). Non-UTF-8
files are decoded with replacement characters and reported.

A folder is indexed up to `[index] max_files` files and `max_total_bytes` of text (less where `max_memory_mb` says
so), and the walk looks at no more
than `_ENTRIES_PER_FILE` directory entries per allowed file: past any of them the rest of the folder is left out,
with a warning (`WalkResult.warnings`). Nothing here stops the run; the walk is a loop, not a recursion, so a
folder nested thousands deep costs its size and no more.
"""

from __future__ import annotations

import logging
import os
import stat
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from graph.languages import language_for
from repocomp.config.schema import Config
from repocomp.errors import RepocompError
from repocomp.index.ignore import Limits, PatternSet

_ENTRIES_PER_FILE = 20  # directory entries the walk looks at per allowed file ([index] max_files)
_WALK_ORDER = "in walk order: a folder's files, then its folders, by name"
_PARTIAL = "indexed partially"  # what each warning of a limit reached says (`partial_index`)
_MAX_GITIGNORE_BYTES = 1 << 20  # the start of a larger .gitignore is read, the rest ignored (with a warning)

log = logging.getLogger(__name__)

ALWAYS_SKIPPED_DIRS = {".git", ".hg", ".svn", "__pycache__", "node_modules", ".venv", ".tox", ".mypy_cache"}


@dataclass
class SourceFile:
    path: str  # relative, POSIX
    language: str
    text: str


@dataclass
class WalkResult:
    files: list[SourceFile] = field(default_factory=list)
    # the files after the first `keep_chars` of text (`walk_repository`): (path, characters), their texts left on
    # disk to be read again when indexed
    later: list[tuple[str, int]] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)  # reason -> count
    notes: list[str] = field(default_factory=list)  # "path: reason" for the reported ones (non-UTF-8, ...)
    warnings: list[str] = field(default_factory=list)  # what the whole walk left out: limits reached


def addressable(rel: str) -> bool:
    """A path without control characters (a newline in a name breaks FILE:LINE, prompts and result lines)."""
    return not any(ord(c) < 0x20 or ord(c) == 0x7F for c in rel)


def open_regular(path: Path) -> tuple[BinaryIO | None, str | None]:
    """A regular file opened for reading: (file, None), or (None, "not_regular" | "unreadable").

    Checks the file type before opening (a FIFO would block `open` forever, a device may act on it), opens
    without blocking, and checks again on the open descriptor in case the file was swapped in between.
    """
    try:
        st = os.stat(path)
    except OSError:
        return None, "unreadable"
    if not stat.S_ISREG(st.st_mode):
        return None, "not_regular"
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError:
        return None, "unreadable"
    fh = os.fdopen(fd, "rb")
    try:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            fh.close()
            return None, "not_regular"
    except OSError:
        fh.close()
        return None, "unreadable"
    return fh, None


def read_regular(path: Path, max_bytes: int, head: bool = False) -> tuple[bytes | None, str | None]:
    """The bytes of a regular file (`open_regular`): (data, None), or (None, "not_regular" | "too_large" |
    "unreadable"). `head`: a larger file gives its first `max_bytes + 1` bytes instead of "too_large" (the caller
    cuts)."""
    fh, reason = open_regular(path)
    if fh is None:
        return None, reason
    try:
        with fh:
            size = os.fstat(fh.fileno()).st_size
            if size > max_bytes and not head:
                return None, "too_large"
            data = _read_bounded(fh, size, max_bytes + 1)
    except OSError:
        return None, "unreadable"
    return (None, "too_large") if len(data) > max_bytes and not head else (data, None)


def _read_bounded(fh: BinaryIO, size: int, limit: int) -> bytes:
    """At most `limit` bytes, in memory proportional to what is read: `read(limit)` would allocate the whole bound
    up front (4 GiB for a two-line task file: a MemoryError under a container's address-space cap). A file that
    grew since its size was taken is read on in blocks, still bounded."""
    first = fh.read(min(limit, size + 1))
    if len(first) <= size or len(first) >= limit:
        return first
    blocks, total = [first], len(first)
    while total < limit:
        block = fh.read(min(1 << 20, limit - total))
        if not block:
            break
        blocks.append(block)
        total += len(block)
    return b"".join(blocks)


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


def _gitignore_lines(path: Path) -> tuple[list[str], bool]:
    """The lines of a .gitignore (none when it is missing or not a regular file), and whether it was cut."""
    data, _ = read_regular(path, _MAX_GITIGNORE_BYTES, head=True)
    if data is None:
        return [], False
    cut = len(data) > _MAX_GITIGNORE_BYTES
    lines = data[:_MAX_GITIGNORE_BYTES].decode("utf-8", errors="replace").splitlines()
    return (lines[:-1] if cut else lines), cut  # a cut file's last line may be a piece of a pattern


class FileRule:
    """Which files the index holds: the one rule for the build's walk, incremental updates (editor saves, the
    language server's watcher), the task maker and the benches, so an update never indexes what a build skips.

    By name: `[index] exclude`, every `.gitignore` from the root down, the always-skipped folders (`.git`,
    `node_modules`, ...), the index folder, the configured languages, an addressable name. By content (a file on
    disk or an editor's buffer): the real path inside the root, a regular file, the size limit, no NUL byte.
    `.gitignore` files are read once per instance: make a fresh one when they may have changed. The patterns
    read are bounded (`repocomp.index.ignore.Limits`); `warnings` says what was left out.
    """

    def __init__(self, root: Path, config: Config, index_dir: Path | None = None) -> None:
        self.root = root.resolve()
        self.config = config
        self.index_dir = index_dir if index_dir is not None else self.root / config.index.dir
        self._limits = Limits()
        self._specs: dict[str, PatternSet] = {}  # folder -> its .gitignore (read once)
        self._exclude = PatternSet(self._limits.take("[index] exclude", list(config.index.exclude)))

    @property
    def warnings(self) -> list[str]:
        """Patterns left out so far (over the limits), one line per source."""
        return self._limits.warnings

    def source(self, rel: str, text: str | None = None) -> tuple[SourceFile | None, str | None]:
        """`rel` (POSIX, relative to the root) as the index holds it, from disk or from an editor's `text`:
        (file, None), or (None or the decoded file, why it is left out or noted)."""
        if self._path_ignored(rel):
            return None, "ignored"
        return self.read(rel, text)

    def ignored(self, rel: str, is_dir: bool) -> bool:
        """`rel` is ignored by name; its parent folders are not checked (the walk prunes them as it goes)."""
        if is_dir and (rel.rpartition("/")[2] in ALWAYS_SKIPPED_DIRS or self.root / rel == self.index_dir):
            return True
        if self._exclude and self._exclude.ignores(rel, is_dir):
            return True
        parts = rel.split("/")
        for depth in range(len(parts)):  # the .gitignore of every folder above, each relative to its folder
            spec = self._gitignore_of("/".join(parts[:depth]))
            if spec and spec.ignores("/".join(parts[depth:]), is_dir):
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

    def _gitignore_of(self, rel_dir: str) -> PatternSet:
        if rel_dir not in self._specs:
            where = f"{rel_dir}/.gitignore" if rel_dir else ".gitignore"
            lines, cut = _gitignore_lines(self.root / where)
            if cut:
                self._limits.warnings.append(f"{where}: only its first {_MAX_GITIGNORE_BYTES >> 20} MiB read")
            self._specs[rel_dir] = PatternSet(self._limits.take(where, lines))
        return self._specs[rel_dir]


# what says a folder is a project (the editor snippets' root markers, and other build files)
REPOSITORY_MARKERS = (".git", ".hg", ".svn", "repocomp.toml", "pyproject.toml", "setup.py", "package.json", "go.mod",
                      "Cargo.toml", "pom.xml", "build.gradle", "CMakeLists.txt", "Makefile")


def refuse_broad_root(root: Path, config: Config) -> None:
    """The file system's root or the user's home, with no repository marker in it, is not a repository: indexing
    it would walk everything the user owns (an editor opened at `/` grew the server by 2 GB in a minute)."""
    if config.index.allow_broad_root:
        return
    home = Path.home().resolve()
    what = "the file system's root" if root == Path(root.anchor) else "your home folder" if root == home else ""
    if what and not any((root / marker).exists() for marker in REPOSITORY_MARKERS):
        raise RepocompError(f"{root} is {what}, not a repository (no {', '.join(REPOSITORY_MARKERS[:4])}...): not "
                            "indexed. Open a project's folder, or set [index] allow_broad_root = true to index it "
                            "within [index] max_files and max_total_bytes")


def walk_repository(root: Path, config: Config, index_dir: Path | None = None,
                    keep_chars: int | None = None) -> WalkResult:
    """The files the index holds (`FileRule`), with counts and notes of the ones left out, within the folder's
    limits ([index] max_files, max_total_bytes; `_ENTRIES_PER_FILE`).

    With `keep_chars`, the texts of the files in walk order up to that many characters (the first file's always)
    are kept (`files`), the rest are counted and left on disk (`later`): a build in batches reads each later batch
    when it adds it, so that the walk holds one batch of text, not the repository's."""
    root = root.resolve()
    refuse_broad_root(root, config)
    result = WalkResult()
    rules = FileRule(root, config, index_dir)
    walk = _Walk(root, config, result, keep_chars)
    try:
        root_dev = root.stat().st_dev
    except OSError:
        result.skipped["unreadable"] += 1
        return result
    pending: list[str] = [""]  # folders to visit (relative), last first: a loop, never a recursion
    seen_dirs: set[tuple[int, int]] = set()
    while pending and not walk.full:
        rel_dir = pending.pop()
        here = root / rel_dir if rel_dir else root
        try:
            st = here.stat()
        except OSError:
            result.skipped["unreadable"] += 1
            continue
        if (st.st_dev, st.st_ino) in seen_dirs:  # a symlink back into the tree
            result.skipped["symlink_loop"] += 1
            result.notes.append(f"{rel_dir or '.'}: symlink loop")
            continue
        seen_dirs.add((st.st_dev, st.st_ino))
        if st.st_dev != root_dev:  # another file system mounted here (/proc, /sys, a network share)
            result.skipped["other_filesystem"] += 1
            result.notes.append(f"{_shown(rel_dir)}: another file system, not walked")
            continue
        dirs, files = walk.entries(here)
        for name in files:
            rel = f"{rel_dir}/{name}" if rel_dir else name
            if rules.ignored(rel, False):
                continue
            source, reason = rules.read(rel)
            if reason == "unsupported":
                continue
            if reason is not None:
                result.skipped[reason] += 1  # non-UTF-8 files are still indexed, but counted and named
                shown = _shown(rel)
                result.notes.append(f"{shown}: {reason.replace('_', ' ')}")
                log.info("%s: %s", shown, reason)
            if source is not None and not walk.add(source):
                break
        kept = []
        for name in dirs if not walk.full else ():
            rel = f"{rel_dir}/{name}" if rel_dir else name
            if rules.ignored(rel, True):
                continue
            full = here / name
            if full.is_symlink():
                try:
                    target = full.resolve(strict=True)
                except (OSError, RuntimeError):
                    result.skipped["symlink_loop"] += 1
                    result.notes.append(f"{_shown(rel)}: broken or looping symlink")
                    continue
                if not target.is_relative_to(root):
                    result.skipped["symlink_outside"] += 1
                    continue
            kept.append(rel)
        pending.extend(reversed(kept))  # visited in name order, depth first
    result.warnings = rules.warnings + result.warnings
    return result


def _shown(rel: str) -> str:
    return rel if addressable(rel) else repr(rel)


def partial_index(warnings: list[str]) -> str | None:
    """The warning of a walk (or of the index it built) that says a limit left part of the folder out; None when
    the folder was indexed whole."""
    return next((w for w in warnings if _PARTIAL in w), None)


class _Walk:
    """The folder's limits as the walk goes: entries looked at, files and bytes kept."""

    def __init__(self, root: Path, config: Config, result: WalkResult, keep_chars: int | None) -> None:
        self.root = root
        self.keep_chars = keep_chars
        self.kept = 0  # characters of the texts kept
        self.max_files = config.index.max_files
        self.max_bytes, self.bytes_setting = config.index.text_budget()
        self.entries_left = _ENTRIES_PER_FILE * self.max_files
        self.bytes = 0
        self.result = result
        self.full = False

    def entries(self, folder: Path) -> tuple[list[str], list[str]]:
        """The sub-folders and other names of `folder`, sorted; at most the entries left to look at."""
        dirs: list[str] = []
        files: list[str] = []
        try:
            with os.scandir(folder) as it:
                for entry in it:
                    if self.entries_left <= 0:
                        self._stop(f"the walk looked at "
                                   f"{_ENTRIES_PER_FILE * self.max_files:,} entries ({_ENTRIES_PER_FILE} per file "
                                   f"of [index] max_files); the rest of the folder is left out")
                        break
                    self.entries_left -= 1
                    try:
                        is_dir = entry.is_dir()  # follows a symlink, as os.walk does
                    except OSError:
                        is_dir = False
                    (dirs if is_dir else files).append(entry.name)
        except OSError:
            self.result.skipped["unreadable"] += 1
        return sorted(dirs), sorted(files)

    def add(self, source: SourceFile) -> bool:
        """Keep `source` if the limits allow; False once they are reached (the walk stops)."""
        files = len(self.result.files) + len(self.result.later)
        if files >= self.max_files:
            self._stop(f"the first {self.max_files:,} files ([index] max_files); "
                       f"the rest of the folder is left out, from {_shown(source.path)} on ({_WALK_ORDER})")
            return False
        size = len(source.text)  # decoded characters: what the index holds (and what an update counts)
        if self.bytes + size > self.max_bytes:
            self._stop(f"{self.bytes:,} characters of source in "
                       f"{files:,} files ([index] {self.bytes_setting}); the rest of the folder is left out, "
                       f"from {_shown(source.path)} on ({_WALK_ORDER}); a user config can raise the limit")
            return False
        self.bytes += size
        if self.keep_chars is not None and self.result.files and (
                self.result.later or self.kept + size > self.keep_chars):
            self.result.later.append((source.path, size))
        else:
            self.kept += size
            self.result.files.append(source)
        return True

    def _stop(self, why: str) -> None:
        if not self.full:
            self.full = True
            warning = f"{self.root}: {_PARTIAL}: {why}"
            self.result.warnings.append(warning)
            log.info("%s", warning)  # the index says it once (Index.notice)
