"""Repository walking: which files get indexed, and why the others were skipped.

Respects `.gitignore` files (root and nested, via pathspec), skips `.git` and the index folder, binary files
(NUL bytes), files over the size limit, unreadable files and symlinks that loop or leave the repository.
Non-UTF-8 files are decoded with replacement characters and reported. Nothing here stops the run.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pathspec

from graph.languages import language_for
from repocomp.config import Config

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


def read_source(root: Path, rel: str, config: Config) -> tuple[SourceFile | None, str | None]:
    """Read one file as the indexer would: (file, None) or (None or decoded file, reason it was skipped/noted)."""
    language = language_for(rel)
    if language is None or language not in config.index.languages:
        return None, "unsupported"
    full = root / rel
    try:
        size = full.stat().st_size
        if size > config.index.max_file_bytes:
            return None, "too_large"
        data = full.read_bytes()
    except OSError:
        return None, "unreadable"
    if b"\x00" in data:
        return None, "binary"
    try:
        return SourceFile(rel, language, data.decode("utf-8")), None
    except UnicodeDecodeError:
        return SourceFile(rel, language, data.decode("utf-8", errors="replace")), "non_utf8_replaced"


def _gitignore(dirpath: Path, rel_dir: str) -> tuple[pathspec.PathSpec, str] | None:
    """The folder's .gitignore, with the folder its patterns are relative to."""
    ignore = dirpath / ".gitignore"
    if not ignore.is_file():
        return None
    try:
        lines = ignore.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    return pathspec.GitIgnoreSpec.from_lines(lines), rel_dir


def walk_repository(root: Path, config: Config, index_dir: Path | None = None) -> WalkResult:
    root = root.resolve()
    result = WalkResult()
    specs: list[tuple[pathspec.PathSpec, str]] = []
    if config.index.exclude:
        specs.append((pathspec.GitIgnoreSpec.from_lines(config.index.exclude), ""))
    seen_dirs: set[tuple[int, int]] = set()

    def ignored(rel: str, is_dir: bool) -> bool:
        for spec_, base in specs:
            if base and not rel.startswith(base + "/"):
                continue
            sub = rel[len(base) + 1:] if base else rel
            if spec_.match_file(sub + ("/" if is_dir else "")):
                return True
        return False

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
        found = _gitignore(here, rel_dir)
        if found is not None:
            specs.append(found)
        kept = []
        for name in sorted(dirnames):
            rel = f"{rel_dir}/{name}" if rel_dir else name
            full = here / name
            if name in _ALWAYS_SKIPPED_DIRS or (index_dir is not None and full == index_dir) or ignored(rel, True):
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
            if ignored(rel, False):
                continue
            source, reason = read_source(root, rel, config)
            if reason == "unsupported":
                continue
            if reason is not None:
                result.skipped[reason] += 1  # non-UTF-8 files are still indexed, but counted and named
                result.notes.append(f"{rel}: {reason.replace('_', ' ')}")
                log.info("%s: %s", rel, reason)
            if source is not None:
                result.files.append(source)
    return result
