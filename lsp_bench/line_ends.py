"""`repocomp bench line-ends REPO FILE`: what Neovim 0.12 shows at the end of complete lines, or at lines the
developer is about to type (`--emptied`).

Neovim, configured with the documented snippet (`lsp_bench.nvim`) and the server's default backend (the local
model where this user prepared it), opens FILE and, for each of `--lines` code lines drawn with a seed, leaves insert
mode, appends at the end of the line (`A`) and waits for ghost text. At a line end the answer is the next line (a
line break, then the line as the model indents it). With `--emptied` the line itself is emptied instead (the
developer is about to type it, the code below stands), insert mode starts at its column 0, and the answer's first
line is scored against the line that stood there; the line is put back before the next. `--rest-ms R` (with
`--emptied`) first rests the cursor on the line above for R ms in normal mode, as a developer who looks before
writing on below it: the snippet's prefetch (`repocomp/prefetch`, sent after 300 ms) prepares that line's
completion meanwhile; with `--no-editor-prefetch` the snippet sends none (as Emacs with eglot or Helix), and the
server prefetches the line the emptying edit ended on once the edits pause. `--config FILE` is the
user's settings file for the server (e.g. `[prompt] fim = "none"`). Figures: lines answered (any ghost text),
answers right, the time from entering insert mode to the ghost text, and the server's RSS at the end (the model
loaded, the repository open).
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lsp_bench.nvim import run_plan
from repocomp.backends.local_model import default_model_dir

LOAD_MS = 600_000  # indexing and loading (and warming) the local model on a busy 2-core machine


@dataclass
class LineEndsResult:
    file: str
    lines: list[int]  # 1-based lines whose end was completed
    answered: int
    next_line_right: int
    latency_p50_ms: float
    latency_max_ms: float
    answers: list[str | None]  # per line: the ghost text, None when none showed
    error: str | None
    emptied: bool = False  # the lines were emptied (the developer about to type them), not completed at their end
    # the server's resident set at the end (`repocomp/stats`), and of it the pages of files it reads in place (the
    # model's weights, the index), which the kernel takes back under memory pressure; 0 where not read
    server_rss_mb: float = 0.0
    server_file_rss_mb: float = 0.0
    prefetches: int = 0  # prefetches the server finished (`repocomp/stats`), and their time in all
    prefetch_s: float = 0.0
    prefetches_after_edits: int = 0  # of them, started by the server at a pause after edits


def pick_lines(text: str, n: int, seed: int) -> list[int]:
    """`n` code lines (1-based, seeded): not blank, not a comment, not the file's last non-blank line."""
    rows = text.splitlines()
    last = max((i for i, row in enumerate(rows) if row.strip()), default=-1)
    code = [i + 1 for i, row in enumerate(rows[:last])
            if row.strip() and not row.lstrip().startswith(("#", "//", "/*", "*"))]
    return sorted(random.Random(seed).sample(code, min(n, len(code))))


def _next_line(rows: list[str], line: int) -> str:
    return next((row for row in rows[line:] if row.strip()), "")


def run_line_ends(repo: Path, file: Path, n: int = 30, seed: int = 0, ghost_ms: int = 120_000, *,
                  emptied: bool = False, config_file: Path | None = None, rest_ms: int = 0,
                  editor_prefetch: bool = True) -> LineEndsResult:
    text = file.read_text(encoding="utf-8")
    rows = text.splitlines()
    lines = pick_lines(text, n, seed)
    steps: list[dict[str, Any]] = [{"ready": LOAD_MS}]
    for line in lines:
        if emptied:
            rest = [{"cursor": line - 1}, {"sleep": rest_ms}] if rest_ms and line > 1 else []
            steps += [{"key": "<Esc>"}, {"sleep": 50}, {"set_line": line, "text": ""}, *rest,
                      {"insert": True, "line": line, "col": 0}, {"ghost": ghost_ms}, {"key": "<Esc>"}, {"sleep": 50},
                      {"set_line": line, "text": rows[line - 1]}]
        else:
            steps += [{"key": "<Esc>"}, {"sleep": 50}, {"insert": True, "line": line, "col": len(rows[line - 1])},
                      {"ghost": ghost_ms}]
    steps.append({"stats": 10_000})
    with tempfile.TemporaryDirectory(prefix="repocomp-line-ends-") as work:
        if config_file is not None:  # Neovim's server reads the user's settings from its own config folder
            user = Path(work) / "config" / "repocomp" / "config.toml"
            user.parent.mkdir(parents=True)
            user.write_bytes(config_file.read_bytes())
        # Neovim runs with its own HOME: point the server at this user's local model
        run = run_plan(repo, file, lines[0], 0, steps, Path(work), env={"REPOCOMP_MODEL_DIR": str(default_model_dir())},
                       limit_s=(LOAD_MS + len(lines) * (ghost_ms + 500)) / 1000, prefetch=editor_prefetch)
    records = run.result.get("records", [])
    answers: list[str | None] = [r["text"] if r["ghost"] else None for r in records]
    latencies = [r["latency_ms"] for r in records if r["ghost"]]
    def want(line: int) -> str:
        return rows[line - 1] if emptied else _next_line(rows, line)

    right = sum(1 for line, answer in zip(lines, answers, strict=False)
                if answer is not None and answer.strip().split("\n")[0].strip() == want(line).strip())
    stats = run.result.get("stats") or {}
    prefetched = stats.get("prefetches") or {}
    return LineEndsResult(str(file), lines, sum(a is not None for a in answers), right,
                          round(statistics.median(latencies), 1) if latencies else 0.0,
                          round(max(latencies), 1) if latencies else 0.0, answers, run.result.get("error"), emptied,
                          round(stats.get("rss_bytes", 0) / 2**20, 1), round(stats.get("file_rss_bytes", 0) / 2**20, 1),
                          prefetched.get("done", 0), round(sum(prefetched.get("done_ms", [])) / 1000, 1),
                          prefetched.get("after_edits", 0))


def format_table(r: LineEndsResult) -> str:
    n = len(r.lines)
    rows = [("line ends answered (ghost text)", f"{r.answered} of {n}"),
            ("first line == the line emptied" if r.emptied else "first line == the file's next line",
             f"{r.next_line_right} of {n}"),
            ("insert mode -> ghost text p50 / max", f"{r.latency_p50_ms:.0f} / {r.latency_max_ms:.0f} ms"),
            ("the server's RSS at the end (of it pages of files read in place)",
             f"{r.server_rss_mb:.0f} MB ({r.server_file_rss_mb:.0f} MB)"),
            ("prefetches the server finished, their time in all; started at a pause after edits",
             f"{r.prefetches}, {r.prefetch_s:.1f} s; {r.prefetches_after_edits}")]
    rows += [("error", r.error)] if r.error else []
    width = max(len(a) for a, _ in rows)
    return "\n".join([f"repocomp bench line-ends {r.file} (Neovim 0.12)"] + [f"{a:<{width}}  {b}" for a, b in rows])


def register(verbs: argparse._SubParsersAction) -> None:
    p = verbs.add_parser("line-ends", help="Neovim at the end of complete lines: how many get a next-line answer")
    p.add_argument("repo", type=Path, help="the repository (Neovim's working folder)")
    p.add_argument("file", type=Path, help="a file in it")
    p.add_argument("--lines", type=int, default=30, help="line ends tried (default 30)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ghost-ms", type=int, default=120_000, help="wait for ghost text per line end (default 120 s)")
    p.add_argument("--emptied", action="store_true",
                   help="empty each line and complete at its column 0 (the line the developer is about to type)")
    p.add_argument("--rest-ms", type=int, default=0, metavar="R",
                   help="with --emptied: rest the cursor on the line above for R ms first (default 0)")
    p.add_argument("--no-editor-prefetch", dest="editor_prefetch", action="store_false",
                   help="the snippet sends no repocomp/prefetch (as Emacs with eglot, Helix)")
    p.add_argument("--config", type=Path, metavar="FILE", help="the user's settings file for the server")
    p.add_argument("--json", type=Path, metavar="F", help="also write the figures and answers as JSON")
    p.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    from lsp_bench.bench import report

    file = args.file if args.file.is_absolute() else args.repo / args.file
    if not file.is_file():
        raise SystemExit(f"{file}: no such file")
    result = run_line_ends(args.repo.resolve(), file.resolve(), args.lines, args.seed, args.ghost_ms,
                           emptied=args.emptied, config_file=args.config, rest_ms=args.rest_ms,
                           editor_prefetch=args.editor_prefetch)
    return report(result, format_table(result), args.json)
