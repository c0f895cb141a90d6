"""`repocomp bench typing`: a typing replay through a real Neovim 0.12 (ghost text), against a slow backend or the
real local model.

The end of a fixture file is typed again key by key (8 characters a second on average; gaps drawn from a
log-normal, so some exceed Neovim's 200 ms debounce as real typing does), with a pause every ~20 keys in the
middle of a line, where the user waits for ghost text. The backend is `lsp_bench.slow_backend` (1.5 s per
generation, writing what the file really says next) used through `[backend] name = "vllm"`, one RepoCoder round.
Neovim is configured with the documented snippet (`lsp_bench.nvim`). Figures:
- generations started, and abandoned before their end (cancelled), per 100 keystrokes;
- from the last keystroke before a pause to the right ghost text (median, p90, max), and pauses without it.

`--backend local` replays the same typing against the in-process local model instead (`repocomp model prepare`;
`--config FILE` adds the user's settings, e.g. `[backend.transformers] dtype = "float32"`). A small model rarely
writes exactly what the file says, so a pause waits for any ghost text (`GHOST_WAIT_LOCAL_MS` at most) and counts the right ones
apart. It also prints the CPU's flags (AMX, AVX-512 BF16, AVX2), the server's completion requests, and the model's
prefix reuse from the server's `repocomp/stats` (requests that reused the prefix computed for an earlier one,
prompt tokens reused and computed).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lsp_bench.nvim import run_plan
from lsp_bench.slow_backend import SlowBackend
from repocomp.bench.complete import cpu_flags
from repocomp.config.schema import Config
from repocomp.errors import RepocompError

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "content_repo"
DEFAULT_FILE = "ledger/currency.py"
GHOST_WAIT_MS = 8000  # a pause without the right ghost text by then counts as a miss
GHOST_WAIT_LOCAL_MS = 30_000  # the local model on 2 busy cores: a prefill of 1k tokens alone may take seconds
READ_MS = 300  # the user reads the ghost text, then types on
BACKENDS = ("slow", "local")


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
    backend: str = "slow"  # "slow" (lsp_bench.slow_backend) or "local" (the in-process model)
    cpu: str = ""  # the CPU's flags that decide a model's speed (AMX, AVX-512 BF16, AVX2)
    ghost_p95_ms: float = float("nan")
    ghost_right: int = 0  # pauses whose ghost text was what the file says next (local: any ghost text is waited for)
    requests: int = 0  # inline completion requests the server answered
    prefix_cache: dict[str, float] = field(default_factory=dict)  # the local model's prefix reuse (server stats)
    ghost_texts: list[str] = field(default_factory=list)  # per pause, what the ghost text showed ("" none)

    def per_100_keys(self, n: int) -> float:
        return 100 * n / self.keys


def typing_plan(text: str, keys: int, cps: float, rng: random.Random, pause_every: int = 20,
                ghost_ms: int = GHOST_WAIT_MS, expect: bool = True) -> tuple[str, list[dict[str, Any]]]:
    """(what gets typed, the driver steps): `keys` characters of `text`, pauses mid-line every ~`pause_every`, each
    waiting up to `ghost_ms` for the right ghost text (`expect`) or any."""
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
            ghost: dict[str, Any] = {"ghost": ghost_ms, "want": rest.rstrip()}
            if expect:
                ghost["expect"] = rest.rstrip()
            steps += [{"type": burst, "gaps_ms": gaps}, ghost, {"sleep": READ_MS}]
            burst, gaps, since_pause = "", [], 0
    if burst:
        steps.append({"type": burst, "gaps_ms": gaps})
    return typed, steps


def run_replay(keys: int = 200, cps: float = 8.0, latency_s: float = 1.5, seed: int = 0,
               file: str = DEFAULT_FILE, server_path: Path | None = None, backend: str = "slow",
               config_file: Path | None = None) -> ReplayResult:
    """`server_path`: run the language server from that source tree (a worktree of another commit) instead, so
    that servers are compared with the same replay. `backend`: "slow" (the fake, `latency_s` per generation) or
    "local" (the in-process local model, with the settings of `config_file` when given)."""
    if backend not in BACKENDS:
        raise RepocompError(f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}")
    local = backend == "local"
    user_config = _local_user_config(config_file) if local else ""
    with _scratch() as tmp:
        repo = Path(tmp) / "repo"
        shutil.copytree(FIXTURE, repo, ignore=shutil.ignore_patterns(".repocomp"))
        path = repo / file
        source = path.read_text(encoding="utf-8")
        start = source.rfind("\n", 0, max(0, len(source) - keys)) + 1  # a line start, `keys` or more from the end
        typed, steps = typing_plan(source[start:], keys, cps, random.Random(seed),
                                   ghost_ms=GHOST_WAIT_LOCAL_MS if local else GHOST_WAIT_MS, expect=not local)
        path.write_text(source[:start] + "\n", encoding="utf-8")
        line = source[:start].count("\n") + 1
        slow = None if local else SlowBackend(source, latency_s)
        work = Path(tmp) / "nvim"
        try:
            if slow is not None:
                url = slow.start()
                (repo / "repocomp.toml").write_text(
                    f'[backend]\nname = "vllm"\nmodel = "slow"\nfallback = ""\n[backend.vllm]\nendpoints = ["{url}"]\n'
                    "[retrieval]\niterations = 1\n")
            else:  # the user's own settings (trusted: the model's path), where the server reads them
                (work / "config" / "repocomp").mkdir(parents=True)
                (work / "config" / "repocomp" / "config.toml").write_text(user_config, encoding="utf-8")
            run = run_plan(repo, path, line, 0, [{"ready": 120_000}, {"insert": True}, *steps, {"sleep": 500},
                                                 {"stats": 10_000}],
                           work, env={"PYTHONPATH": str(server_path)} if server_path else None,
                           options={"autoindent": False, "smartindent": False, "indentexpr": ""},
                           limit_s=1800 if local else 600)
        finally:
            if slow is not None:
                slow.stop()
    if run.result.get("error"):
        raise RuntimeError(f"the replay failed: {run.result['error']}\n{run.server_log[-3000:]}")
    got = run.result["lines"][line - 1:]
    if "\n".join(got).rstrip() != typed.rstrip():
        raise RuntimeError(f"the buffer is not what was typed: {got!r}")
    records = run.result["records"]
    wanted = [step["want"] for step in steps if "ghost" in step]
    right = [bool(r["ghost"]) and _is_right(r.get("text", ""), want) for r, want in zip(records, wanted)]
    # a pause's wait ends at the right ghost text (slow: what the driver waited for) or at any (local)
    waits = sorted(r["latency_ms"] for r in records if r["ghost"])
    stats = run.result.get("stats") or {}

    def pct(q: float) -> float:
        return float(waits[min(len(waits) - 1, int(q * len(waits)))]) if waits else float("nan")

    if slow is not None:
        generations, abandoned, finished = slow.counts.started, slow.counts.abandoned, slow.counts.finished
    else:  # the server's counts: generations started, requests superseded or cancelled, requests answered
        generations = int((stats.get("generations") or {}).get("started", 0))
        abandoned = int(stats.get("superseded", 0)) + int(stats.get("cancelled", 0))
        finished = len(stats.get("completed_ms") or [])
    return ReplayResult(keys=len(typed), pauses=len(records), latency_s=0.0 if local else latency_s,
                        generations=generations, abandoned=abandoned, finished=finished,
                        ghost_p50_ms=statistics.median(waits) if waits else float("nan"),
                        ghost_p90_ms=pct(0.9), ghost_max_ms=waits[-1] if waits else float("nan"),
                        ghost_missed=sum(1 for r in records if not r["ghost"]),
                        ghost_ms=[round(r["latency_ms"]) if r["ghost"] else None for r in records],
                        backend=backend, cpu=cpu_flags(), ghost_p95_ms=pct(0.95), ghost_right=sum(right),
                        requests=len(stats.get("completed_ms") or []), prefix_cache=_prefix_cache(stats),
                        ghost_texts=[r.get("text", "") if r["ghost"] else "" for r in records])


@contextlib.contextmanager
def _scratch() -> Iterator[str]:
    """A temporary folder, removed when the server is done with it: Neovim quits before its language server has
    finished shutting down (saving the index and the session into the copied repository), so a first removal can
    find new files under it."""
    tmp = tempfile.mkdtemp(prefix="repocomp-bench-typing-")
    try:
        yield tmp
    finally:
        for _ in range(50):
            shutil.rmtree(tmp, ignore_errors=True)
            if not os.path.exists(tmp):
                break
            time.sleep(0.1)


def _is_right(shown: str, want: str) -> bool:
    """Whether the ghost text starts with what the file says next on the line (the driver's `expect` rule)."""
    return bool(want) and shown.startswith(want)


def _prefix_cache(stats: dict[str, Any]) -> dict[str, float]:
    """The server's in-process models' prefix reuse, summed over the models it loaded."""
    entries = stats.get("prefix_cache") or []
    keys = ("requests", "hits", "reused_tokens", "prefilled_tokens")
    out = {k: float(sum(e.get(k, 0) for e in entries)) for k in keys} if entries else {}
    if out:
        out["hit_rate"] = out["hits"] / out["requests"] if out["requests"] else 0.0
    return out


def _local_user_config(config_file: Path | None) -> str:
    """The settings file for a replay with the local model: `config_file`'s tables with the backend made the
    prepared local model in process (an error says how to prepare it when there is none)."""
    import tomllib

    from repocomp.backends.local_model import hint
    from repocomp.backends.model_defaults import resolve_backend

    tables: dict[str, Any] = {}
    if config_file is not None:
        try:
            tables = tomllib.loads(config_file.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise RepocompError(f"--config {config_file}: {exc}") from None
    backend = dict(tables.get("backend") or {})
    config = resolve_backend(Config().replace("backend", name="transformers", model=str(backend.get("model", ""))))
    if config.backend.name != "transformers" or not config.backend.model:
        raise RepocompError(f"no local model to replay with: {hint()}")
    tables["backend"] = {**backend, "name": "transformers", "model": config.backend.model}
    return _toml(tables)


def _toml(tables: dict[str, Any]) -> str:
    """A settings file of top-level tables whose values are strings, numbers, booleans, lists of them or tables."""
    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, str):
            return json.dumps(v)  # a TOML basic string: the same escapes
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        if isinstance(v, dict):  # a section's sub-section (`[backend.transformers]`), as an inline table
            return "{" + ", ".join(f"{k} = {value(x)}" for k, x in v.items()) + "}"
        raise RepocompError(f"--config: cannot pass on the value {v!r}")

    out = []
    for name, table in tables.items():
        if not isinstance(table, dict):
            raise RepocompError(f"--config: {name} must be a table")
        out.append(f"[{name}]")
        out += [f"{key} = {value(v)}" for key, v in table.items()]
    return "\n".join(out) + "\n"


def format_table(r: ReplayResult) -> str:
    local = r.backend == "local"
    ghost = "any" if local else "right"
    rows = [
        ("keystrokes / pauses for ghost text", f"{r.keys} / {r.pauses}"),
        ("generations started (per 100 keys)", f"{r.generations} ({r.per_100_keys(r.generations):.1f})"),
        ("  requests superseded or cancelled (per 100 keys)" if local else
         "  cancelled before their end (per 100 keys)", f"{r.abandoned} ({r.per_100_keys(r.abandoned):.1f})"),
        (f"last keystroke -> {ghost} ghost text p50 / p90 / p95 / max",
         f"{r.ghost_p50_ms:.0f} / {r.ghost_p90_ms:.0f} / {r.ghost_p95_ms:.0f} / {r.ghost_max_ms:.0f} ms"),
        (f"pauses without {ghost} ghost text", f"{r.ghost_missed} of {r.pauses}"),
    ]
    if local:
        rows.append(("pauses whose ghost text was right", f"{r.ghost_right} of {r.pauses}"))
        rows.append(("inline requests answered by the server", f"{r.requests}"))
        c = r.prefix_cache
        if c:
            rows.append(("prefix reuse: model requests that hit", f"{c['hits']:.0f} of {c['requests']:.0f} "
                                                                   f"({c['hit_rate']:.0%})"))
            rows.append(("prompt tokens reused / computed", f"{c['reused_tokens']:.0f} / {c['prefilled_tokens']:.0f}"))
    width = max(len(a) for a, _ in rows)
    head = ("repocomp bench typing (Neovim 0.12, the local model in process)" if local else
            f"repocomp bench typing (Neovim 0.12, backend {r.latency_s:g} s per generation)")
    return "\n".join([head, f"CPU: {r.cpu}"] + [f"{a:<{width}}  {b}" for a, b in rows])


def register(verbs: argparse._SubParsersAction) -> None:
    p = verbs.add_parser("typing", help="typing replay through Neovim with a slow backend or the local model: "
                                        "wasted generations, ghost text latency, prefix reuse")
    p.add_argument("--keys", type=int, default=200, help="keystrokes (default 200)")
    p.add_argument("--cps", type=float, default=8.0, help="characters per second on average (default 8)")
    p.add_argument("--latency", type=float, default=1.5, help="seconds per generation (default 1.5; slow backend)")
    p.add_argument("--backend", choices=BACKENDS, default="slow",
                   help="slow: the fake backend (default); local: the in-process local model (repocomp model prepare)")
    p.add_argument("--config", type=Path, metavar="FILE",
                   help="with --backend local: settings for the server (e.g. [backend.transformers] dtype = \"float32\")")
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
    if args.config is not None and args.backend != "local":
        raise SystemExit("--config goes with --backend local")
    result = run_replay(keys=args.keys, cps=args.cps, latency_s=args.latency, seed=args.seed,
                        server_path=server_path, backend=args.backend, config_file=args.config)
    return report(result, format_table(result), args.json)
