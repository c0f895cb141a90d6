"""`repocomp index PATH`: build and save the index (resuming a build in batches that was interrupted), then print a
summary (or JSON)."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

from repocomp.config.loading import load_config
from repocomp.config.schema import Config
from repocomp.errors import IndexUnusableError
from repocomp.index import Index
from repocomp.index.relation_upkeep import Progress
from repocomp.index.store import fallback_dir, read_meta
from repocomp.text import encodable


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("index", help="index a repository (fragments, code graph, relations, term index)")
    p.add_argument("path", type=Path, help="the repository's folder")
    p.add_argument("--config", type=Path, help="a TOML file with the settings (default: the repository's)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(run=run)


def progress_bar():
    """A rich progress bar on a terminal, nothing otherwise (stderr, so --json stays clean)."""
    if not sys.stderr.isatty():
        return None, None
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    bar = Progress(TextColumn("{task.description:>10}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                   TimeRemainingColumn(), transient=True, console=Console(stderr=True))
    tasks: dict[str, int] = {}

    def update(done: int, total: int, phase: str) -> None:
        if phase not in tasks:
            tasks[phase] = bar.add_task(phase, total=total)
        bar.update(tasks[phase], completed=done, total=total)

    return bar, update


def run(args: argparse.Namespace) -> int:
    root = args.path
    if not root.is_dir():  # checked before reading its config, for the clear message
        Index.build(root)
    config = load_config(root, args.config)
    bar, update = progress_bar()
    t = time.perf_counter()
    with bar if bar is not None else contextlib.nullcontext():
        index = _resumed(root, config, update)
        if index is None:
            index = Index.build(root, config, update, checkpoint=Index.save)
            index.save()
    summary = index.summary.to_dict() | {"root": str(index.root), "index_dir": str(index.index_dir),
                                         "total_s": round(time.perf_counter() - t, 3)}
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(encodable(format_summary(summary)))  # names may hold undecodable bytes
    return 0


def _resumed(root: Path, config: Config, progress: Progress | None) -> Index | None:
    """The stored index of a build in batches that was interrupted, resumed and saved by `Index.open`; None when
    there is none (a complete stored index is built anew: that is what this command is for, and is not read)."""
    stored = (read_meta(folder) or {} for folder in (Index(root, config).index_dir, fallback_dir(root.resolve())))
    if not any((meta.get("summary") or {}).get("pending_files") for meta in stored):
        return None
    try:
        return Index.open(root, config, build=False, progress=progress)
    except IndexUnusableError:
        return None


def format_summary(s: dict) -> str:
    lines = [f"indexed {s['root']} -> {s['index_dir']}"]
    if s["files"] == 0:
        lines.append("note: no source files found (empty repository or all skipped); the index is empty")
    lines += [
        f"  files              {s['files']}" + (f" ({s['parse_errors']} with syntax errors, indexed anyway)"
                                                 if s["parse_errors"] else ""),
        f"  fragments          {s['fragments']}",
        f"  nodes              {s['nodes']}",
        "  edges              " + ", ".join(f"{k} {v}" for k, v in s["edges"].items()),
        f"  relation nonzeros  {s['relation_nonzeros']}",
        "  time               " + ", ".join(f"{k} {v:.2f}s" for k, v in s["phases_s"].items())
        + f" (total {s['total_s']:.2f}s)",
        f"  index size         {s['index_bytes'] / 1e6:.1f} MB",
    ]
    lines += [f"  left out           {warning}" for warning in s["warnings"]]  # a limit reached: the folder in part
    if s["skipped"]:
        lines.append("  skipped            " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in s["skipped"].items()))
        lines += [f"    {note}" for note in s["notes"][:10] if note not in s["warnings"]]
    return "\n".join(lines)
