"""`repocomp bench typing`: a typing replay through a real Neovim 0.12 (ghost text), against a slow backend.

The end of a fixture file is typed again key by key (8 characters a second on average; gaps drawn from a
log-normal, so some exceed Neovim's 200 ms debounce as real typing does), with a pause every ~20 keys in the
middle of a line, where the user waits for ghost text. The backend is `lsp_bench.slow_backend` (1.5 s per
generation, writing what the file really says next) used through `[backend] name = "vllm"`, one RepoCoder round.
Neovim is configured with the documented snippet (`lsp_bench.nvim`). Figures:
- generations started, and abandoned before their end (cancelled), per 100 keystrokes;
- from the last keystroke before a pause to the right ghost text (median, p90, max), and pauses without it.
"""

from __future__ import annotations

import argparse
import math
import random
import shutil
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lsp_bench.nvim import run_plan
from lsp_bench.slow_backend import SlowBackend

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "content_repo"
DEFAULT_FILE = "ledger/currency.py"
GHOST_WAIT_MS = 8000  # a pause without the right ghost text by then counts as a miss
READ_MS = 300  # the user reads the ghost text, then types on


@dataclass
class ReplayResult:
    keys: int
    pauses: int
    latency_s: float
    generations: int
    abandoned: int
    finished: int
    ghost_p50_ms: float
    ghost_p90_ms: float
    ghost_max_ms: float
    ghost_missed: int
    ghost_ms: list[float | None]  # per pause, in typing order: last keystroke to the right ghost text (None: missed)

    def per_100_keys(self, n: int) -> float:
        return 100 * n / self.keys


def typing_plan(text: str, keys: int, cps: float, rng: random.Random, pause_every: int = 20) -> tuple[
        str, list[dict[str, Any]]]:
    """(what gets typed, the driver steps): `keys` characters of `text`, pauses mid-line every ~`pause_every`."""
    typed = text[:keys]
    sigma = 0.5  # log-normal gaps with mean 1/cps: median 110 ms at 8/s, 12 % of them over 200 ms
    mu = math.log(1000 / cps) - sigma**2 / 2
    steps: list[dict[str, Any]] = []
    burst, gaps, since_pause = "", [], 0
    for i, ch in enumerate(typed):
        burst += ch
        gaps.append(round(rng.lognormvariate(mu, sigma)))
        since_pause += 1
        rest = text[i + 1:].split("\n", 1)[0]
        line_so_far = text[: i + 1].rsplit("\n", 1)[-1]
        if since_pause >= pause_every and rest.strip() and line_so_far.strip() and i + 1 < len(typed):
            steps += [{"type": burst, "gaps_ms": gaps}, {"ghost": GHOST_WAIT_MS, "expect": rest.rstrip()},
                      {"sleep": READ_MS}]
            burst, gaps, since_pause = "", [], 0
    if burst:
        steps.append({"type": burst, "gaps_ms": gaps})
    return typed, steps


def run_replay(keys: int = 200, cps: float = 8.0, latency_s: float = 1.5, seed: int = 0,
               file: str = DEFAULT_FILE, server_path: Path | None = None) -> ReplayResult:
    """`server_path`: run the language server from that source tree (a worktree of another commit) instead, so
    that servers are compared with the same replay."""
    with tempfile.TemporaryDirectory(prefix="repocomp-bench-typing-") as tmp:
        repo = Path(tmp) / "repo"
        shutil.copytree(FIXTURE, repo, ignore=shutil.ignore_patterns(".repocomp"))
        path = repo / file
        source = path.read_text(encoding="utf-8")
        start = source.rfind("\n", 0, max(0, len(source) - keys)) + 1  # a line start, `keys` or more from the end
        typed, steps = typing_plan(source[start:], keys, cps, random.Random(seed))
        path.write_text(source[:start] + "\n", encoding="utf-8")
        line = source[:start].count("\n") + 1
        slow = SlowBackend(source, latency_s)
        url = slow.start()
        try:
            (repo / "repocomp.toml").write_text(
                f'[backend]\nname = "vllm"\nendpoints = ["{url}"]\nmodel = "slow"\nfallback = ""\n'
                "[retrieval]\niterations = 1\n")
            run = run_plan(repo, path, line, 0, [{"ready": 120_000}, {"insert": True}, *steps, {"sleep": 500}],
                           Path(tmp) / "nvim", env={"PYTHONPATH": str(server_path)} if server_path else None,
                           options={"autoindent": False, "smartindent": False, "indentexpr": ""},
                           limit_s=600)
        finally:
            slow.stop()
    if run.result.get("error"):
        raise RuntimeError(f"the replay failed: {run.result['error']}\n{run.server_log[-3000:]}")
    got = run.result["lines"][line - 1:]
    if "\n".join(got).rstrip() != typed.rstrip():
        raise RuntimeError(f"the buffer is not what was typed: {got!r}")
    records = run.result["records"]
    waits = sorted(r["latency_ms"] for r in records if r["ghost"])
    def pct(q):
        return (waits[min(len(waits) - 1, int(q * len(waits)))] if waits else float("nan"))
    return ReplayResult(keys=len(typed), pauses=len(records), latency_s=latency_s,
                        generations=slow.counts.started, abandoned=slow.counts.abandoned,
                        finished=slow.counts.finished, ghost_p50_ms=statistics.median(waits) if waits else float("nan"),
                        ghost_p90_ms=pct(0.9), ghost_max_ms=waits[-1] if waits else float("nan"),
                        ghost_missed=sum(1 for r in records if not r["ghost"]),
                        ghost_ms=[round(r["latency_ms"]) if r["ghost"] else None for r in records])


def format_table(r: ReplayResult) -> str:
    rows = [
        ("keystrokes / pauses for ghost text", f"{r.keys} / {r.pauses}"),
        ("generations started (per 100 keys)", f"{r.generations} ({r.per_100_keys(r.generations):.1f})"),
        ("  cancelled before their end (per 100 keys)", f"{r.abandoned} ({r.per_100_keys(r.abandoned):.1f})"),
        ("last keystroke -> right ghost text p50 / p90 / max", f"{r.ghost_p50_ms:.0f} / {r.ghost_p90_ms:.0f} / "
                                                                f"{r.ghost_max_ms:.0f} ms"),
        ("pauses without the right ghost text", f"{r.ghost_missed} of {r.pauses}"),
    ]
    width = max(len(a) for a, _ in rows)
    head = f"repocomp bench typing (Neovim 0.12, backend {r.latency_s:g} s per generation)"
    return "\n".join([head] + [f"{a:<{width}}  {b}" for a, b in rows])


def register(verbs: argparse._SubParsersAction) -> None:
    p = verbs.add_parser("typing", help="typing replay through Neovim with a slow backend: wasted generations, "
                                        "ghost text latency")
    p.add_argument("--keys", type=int, default=200, help="keystrokes (default 200)")
    p.add_argument("--cps", type=float, default=8.0, help="characters per second on average (default 8)")
    p.add_argument("--latency", type=float, default=1.5, help="seconds per generation (default 1.5)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, metavar="F", help="also write the figures as JSON")
    p.add_argument("--server-path", type=Path, metavar="DIR",
                   help="run the server from this source tree (e.g. a git worktree of an earlier commit)")
    p.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    from lsp_bench.bench import report

    server_path = args.server_path.resolve() if args.server_path else None
    if server_path is not None and not (server_path / "lsp_server").is_dir():
        raise SystemExit(f"{args.server_path}: no lsp_server package there")
    result = run_replay(keys=args.keys, cps=args.cps, latency_s=args.latency, seed=args.seed,
                        server_path=server_path)
    return report(result, format_table(result), args.json)
