"""`repocomp bench monorepo OUT [--from DIR ...]`: assemble a large repository of distinct real code to benchmark
the indexer on (`repocomp bench index OUT`).

Copies the source files the indexer reads (by extension) from each source folder into `OUT/<n>-<name>/`, keeping
their paths: by default this interpreter's installed packages (site-packages: torch, transformers, scipy, ... where
installed) and the benchmark repositories in the user's cache. Copies, not links: the walk leaves out symbolic
links that lead out of the repository. Files over `[index] max_file_bytes`, the folders the walk skips and
symbolic links are skipped. Prints files and lines.
"""

from __future__ import annotations

import argparse
import os
import shutil
import site
import sys
from pathlib import Path

from graph.languages import EXTENSIONS
from repocomp.config.paths import user_cache_dir
from repocomp.config.schema import IndexConfig
from repocomp.index.walk import ALWAYS_SKIPPED_DIRS

_SKIPPED_DIRS = ALWAYS_SKIPPED_DIRS | {IndexConfig.dir}  # what the walk skips, and the index folders


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("monorepo", help="assemble a large repository of distinct real code for `bench index`")
    p.add_argument("out", type=Path, help="a new (or empty) folder")
    p.add_argument("--from", dest="sources", type=Path, action="append", default=None,
                   help="a folder to copy sources from (repeatable; default: site-packages and the cached "
                        "benchmark repositories)")
    p.set_defaults(run=run)


def default_sources() -> list[Path]:
    packages = [Path(p) for p in site.getsitepackages() if Path(p).is_dir()]
    benchmarks = user_cache_dir() / "benchmarks"
    repos = sorted(p for p in benchmarks.iterdir() if p.is_dir() and not p.name.endswith(".git")) \
        if benchmarks.is_dir() else []
    return packages + repos


def assemble(out: Path, sources: list[Path], max_file_bytes: int) -> tuple[int, int]:
    """Copy the indexable files of `sources` under `out`; returns (files, lines)."""
    files = lines = 0
    for n, source in enumerate(sources):
        target_root = out / f"{n:02d}-{source.name}"
        for folder, dirs, names in os.walk(source):
            dirs[:] = sorted(d for d in dirs if d not in _SKIPPED_DIRS and not os.path.islink(os.path.join(folder, d)))
            for name in sorted(names):
                path = Path(folder, name)
                if path.suffix not in EXTENSIONS or path.is_symlink() or not path.is_file() \
                        or path.stat().st_size > max_file_bytes:
                    continue
                target = target_root / path.relative_to(source)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target)
                files += 1
                lines += path.read_bytes().count(b"\n")
    return files, lines


def run(args: argparse.Namespace) -> int:
    out: Path = args.out
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        print(f"{out} exists and is not an empty folder", file=sys.stderr)
        return 2
    sources = args.sources or default_sources()
    missing = [s for s in sources if not s.is_dir()]
    if missing:
        print(f"not a folder: {missing[0]}", file=sys.stderr)
        return 2
    files, lines = assemble(out, sources, IndexConfig().max_file_bytes)
    print(f"bench monorepo {out}: {files} files, {lines:,} lines from {len(sources)} folders")
    for s in sources:
        print(f"  {s}")
    return 0
