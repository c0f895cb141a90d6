"""`repocomp bench session PATH`: a long editing session through the real language server (issue 10).

Lines of the repository's own code are typed key by key into its files (one keystroke, then an inline
completion request, as an editor with ghost text sends them), with a pause after each line long enough for the
server to put the buffer into its index; every few lines the document is closed (its unsaved edits dropped) and
another file is opened. Every `sample` keystrokes the server's RSS and its index's id counts are recorded; at
the end the bench waits for the background refresh to leave no stale relation row. Figures: typing latency
(server side, p50 / p95), RSS, ids and the handler futures the protocol holds over the session (flat means
bounded: compaction keeps dead ids from dominating), and how long the refresh took to catch up.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lsp_bench.bench import BENCH_OPTIONS, Session, pct, python_files, report

PAUSE_S = 0.4  # after each typed line: past the server's 0.3 s buffer-sync delay
LINES_PER_FILE = 8


@dataclass
class SessionResult:
    repo: str
    keys: int
    typing_p50_ms: float
    typing_p95_ms: float
    typing_max_ms: float
    catch_up_s: float  # from the last keystroke until no relation row is stale
    samples: list[dict[str, Any]] = field(default_factory=list)  # per `sample` keys: rss_mb and the id counts


def _typed_lines(files: list[Path], rng: random.Random, n: int) -> list[str]:
    """Code lines to type: non-blank lines of the repository's files, without their indentation."""
    pool: list[str] = []
    for path in rng.sample(files, min(len(files), 40)):
        pool += [ln.strip() for ln in path.read_text(encoding="utf-8", errors="replace").split("\n")
                 if 8 <= len(ln.strip()) <= 80]
    return [rng.choice(pool) for _ in range(n)]


async def _sample(session: Session, keys: int) -> dict[str, Any]:
    for _ in range(100):  # the ids are not read while the update worker writes (a few ms): ask again
        stats = await session.stats()
        ids = next((f["ids"] for f in stats["folders"] if f.get("ids")), None)
        if ids is not None:
            break
        await asyncio.sleep(0.01)
    return {"keys": keys, "rss_mb": round(stats["rss_bytes"] / 2**20, 1),
            "handlers": stats.get("handlers_running"), **(ids or {})}


async def run_session(repo: Path, *, keys: int = 10_000, sample: int = 500, seed: int = 0, memory: bool = True,
                      ready_timeout: float = 1800.0, catch_up_timeout: float = 600.0) -> SessionResult:
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="repocomp-bench-session-") as tmp:
        work = Path(tmp) / repo.name
        shutil.copytree(repo, work, symlinks=True, ignore=shutil.ignore_patterns(".git"))
        files = python_files(work)
        if not files:
            raise SystemExit(f"no Python files under {repo}")
        lines = _typed_lines(files, rng, keys // 8 + 1)
        session = Session(work, [])
        try:
            await session.start(BENCH_OPTIONS | {"memory": {"enabled": memory}})
            await session.wait_ready(ready_timeout)
            before = len((await session.stats())["completed_ms"])
            samples = [await _sample(session, 0)]
            typed = 0
            uri, at, lines_here = None, 0, 0
            while typed < keys:
                if uri is None or lines_here == LINES_PER_FILE:
                    if uri is not None:
                        session.close(uri)
                    path = rng.choice(files)
                    text = path.read_text(encoding="utf-8", errors="replace")
                    uri, lines_here = path.as_uri(), 0
                    at = rng.randrange(text.count("\n") + 1)  # a new line is typed above line `at`
                    session.open(uri, text)
                session.insert(uri, at, 0, "\n")
                for i, ch in enumerate(lines.pop()):
                    session.insert(uri, at, i, ch)
                    await session.inline(uri, at, i + 1)
                    typed += 1
                    if typed % sample == 0:
                        samples.append(await _sample(session, typed))
                    if typed == keys:
                        break
                at, lines_here = at + 1, lines_here + 1
                await asyncio.sleep(PAUSE_S)
            typing = (await session.stats())["completed_ms"][before:]
            t0 = time.perf_counter()
            while True:  # the background refresh catches up
                last = await _sample(session, typed)
                if last.get("stale") == 0 and (await session.stats())["updates_pending"] == 0:
                    break
                if time.perf_counter() - t0 > catch_up_timeout:
                    raise RuntimeError(f"relation rows still stale {catch_up_timeout:.0f} s after the session")
                await asyncio.sleep(0.1)
            catch_up = time.perf_counter() - t0
            samples.append(last)
        finally:
            await session.stop()
    return SessionResult(repo=str(repo), keys=typed, typing_p50_ms=round(pct(typing, 0.5), 2),
                         typing_p95_ms=round(pct(typing, 0.95), 2), typing_max_ms=round(max(typing), 1),
                         catch_up_s=round(catch_up, 2), samples=samples)


def format_table(r: SessionResult) -> str:
    out = [f"repocomp bench session {r.repo}: {r.keys} keystrokes, an inline request after each (extractive backend)",
           f"typing, server side p50 / p95 / max: {r.typing_p50_ms:.1f} / {r.typing_p95_ms:.1f} / "
           f"{r.typing_max_ms:.1f} ms",
           f"stale relation rows gone {r.catch_up_s:.2f} s after the last keystroke",
           f"{'keys':>6} {'RSS MB':>7} {'nodes':>8} {'alive':>8} {'frag ids':>9} {'alive':>7} {'stale':>6} "
           f"{'compactions':>11} {'handlers':>8}"]
    for s in r.samples:
        out.append(f"{s['keys']:>6} {s['rss_mb']:>7.1f} {s.get('nodes', '-'):>8} {s.get('nodes_alive', '-'):>8} "
                   f"{s.get('fragments', '-'):>9} {s.get('fragments_alive', '-'):>7} {s.get('stale', '-'):>6} "
                   f"{s.get('compactions', '-'):>11} {s.get('handlers', '-'):>8}")
    return "\n".join(out)


def register(verbs: argparse._SubParsersAction) -> None:
    p = verbs.add_parser("session", help="a long editing session: typing latency, memory and index ids over time")
    p.add_argument("path", type=Path, help="repository to serve (copied to a temporary directory first)")
    p.add_argument("--keys", type=int, default=10_000, help="keystrokes typed (default 10000)")
    p.add_argument("--sample", type=int, default=500, help="record RSS and ids every N keys (default 500)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-memory", action="store_true", help="with the session memory off (on by default)")
    p.add_argument("--json", type=Path, metavar="F", help="also write the figures as JSON")
    p.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    from repocomp.errors import RepocompError

    if not args.path.is_dir():
        raise RepocompError(f"{args.path}: not a directory")
    if args.keys < 1 or args.sample < 1:
        raise RepocompError("--keys and --sample must be positive")
    result = asyncio.run(run_session(args.path.resolve(), keys=args.keys, sample=args.sample, seed=args.seed,
                                     memory=not args.no_memory))
    return report(result, format_table(result), args.json)
