"""`repocomp bench retrieve PATH`: per-request latency of retrieval + FragRel + prompt assembly (no LLM).

Cursor positions are drawn (seeded) from the indexed files; each is completed by the real engine entry point
(`Completer.acomplete`, RepoCoder mode) with no model: round-2 drafts come from the extractive backend, whose
time is reported apart and excluded from the per-iteration figure. Per iteration we time what a request pays
before the LLM: similarity over all fragments, leak rule, FragRel re-scoring, ranking, block assembly, the
definitions (the buffer scan once per request, counted in iteration 1; ranking and rendering every iteration)
and the token-budgeted prompt.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from repocomp.config.schema import SIMILARITIES
from repocomp.errors import RepocompError

__all__ = ["register", "run_retrieve_bench", "RetrieveBenchResult"]


@dataclass
class RetrieveBenchResult:
    repo: str
    fragments: int
    files: int
    positions: int
    runs: int
    iterations: int
    similarity: str
    alpha: float
    query_relations: float
    definitions: bool = True
    per_iteration_ms: dict[str, dict[str, float]] = field(default_factory=dict)  # "1", "2" -> p50/p95/mean/max
    stages_ms: dict[str, dict[str, float]] = field(default_factory=dict)  # stage -> p50/p95 (all iterations)
    first_request_ms: float = 0.0  # includes one-time warm-up (caches, tokenizer)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("retrieve", help="latency of retrieval + FragRel + prompt per request (no LLM)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("path", type=Path, help="repository root (indexed first if needed)")
    p.add_argument("--runs", type=int, default=3, help="passes over the positions (default 3)")
    p.add_argument("--positions", type=int, default=300, help="cursor positions (default 300)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--iterations", type=int, help="RepoCoder rounds (default: 2, as without a model)")
    p.add_argument("--similarity", choices=SIMILARITIES, help="override [retrieval] similarity")
    p.add_argument("--alpha", type=float, help="override FragRel alpha (0 = off)")
    p.add_argument("--query-relations", type=float, metavar="W", help="override query-side relation weight")
    p.add_argument("--no-definitions", action="store_true", help="no definitions section")
    p.add_argument("--config", type=Path, metavar="FILE")
    p.add_argument("--json", action="store_true", help="print the result as JSON instead of a table")
    p.set_defaults(run=_run)


def _stats(values: list[float]) -> dict[str, float]:
    a = np.asarray(values, np.float64)
    return {"p50": round(float(np.percentile(a, 50)), 3), "p95": round(float(np.percentile(a, 95)), 3),
            "mean": round(float(a.mean()), 3), "max": round(float(a.max()), 3), "n": int(len(a))}


def _positions(index: Any, n: int, seed: int) -> list[tuple[str, int, int]]:
    """(path, line, col): seeded, in files with content, at the end of a non-blank line's indentation + text."""
    rng = random.Random(seed)
    candidates: list[tuple[str, int, int]] = []
    for path in sorted(index.files):
        lines = index.file_lines(path) or []
        for i, line in enumerate(lines):
            if i >= 5 and line.strip():
                # a RepoEval-like hole: the cursor after the line's indentation, code above as the query
                candidates.append((path, i, len(line) - len(line.lstrip())))
    if not candidates:
        raise RepocompError("no code lines to place a cursor on in this index")
    return rng.sample(candidates, min(n, len(candidates)))


async def _bench(index: Any, config: Any, positions: list[tuple[str, int, int]], runs: int) -> tuple[list, float]:
    from repocomp.backends.extractive import ExtractiveBackend
    from repocomp.pipeline import Completer

    completer = Completer(index, config, ExtractiveBackend())
    texts = {p: "\n".join(index.file_lines(p) or []) for p, _, _ in positions}
    t = time.perf_counter()
    path, line, col = positions[0]
    await completer.acomplete(path, texts[path], line, col)
    first = (time.perf_counter() - t) * 1e3
    records = []
    for _ in range(runs):
        for path, line, col in positions:
            res = await completer.acomplete(path, texts[path], line, col)
            records.append(res.timings_ms)
    await completer.aclose()
    return records, first


def run_retrieve_bench(root: Path, config: Any, positions: int = 300, runs: int = 3, seed: int = 0,
                       progress: Any = None) -> RetrieveBenchResult:
    from repocomp.backends.model_defaults import resolve_config
    from repocomp.index import Index

    resolved = resolve_config(config, reads_prompt=False)  # no model: the reference's rounds and budget
    index = Index.open(root, resolved, build=True, progress=progress)
    pos = _positions(index, positions, seed)
    records, first = asyncio.run(_bench(index, resolved, pos, runs))
    rc = resolved.retrieval
    out = RetrieveBenchResult(repo=str(root), fragments=int(index.term_index.nonempty().sum()), files=len(index.files),
                              positions=len(pos), runs=runs, iterations=rc.iterations, similarity=rc.similarity,
                              alpha=rc.alpha, query_relations=rc.query_relations, first_request_ms=round(first, 3),
                              definitions=resolved.definitions.enabled)
    for r in range(1, rc.iterations + 1):
        per = [rec[f"retrieve_{r}"] + rec.get(f"definitions_{r}", 0.0) + rec[f"prompt_{r}"]
               + (rec.get("definitions_scan", 0.0) if r == 1 else 0.0) for rec in records if f"retrieve_{r}" in rec]
        if per:
            out.per_iteration_ms[str(r)] = _stats(per)
    for stage in ("retrieve", "similarity", "leak", "fragrel", "rank", "definitions_scan", "definitions", "prompt",
                  "generate", "sync"):
        vals = [v for rec in records for k, v in rec.items()
                if k == stage or (k.startswith(stage + "_") and k[len(stage) + 1:].isdigit())]
        if vals:
            out.stages_ms[stage + (" (extractive draft, excluded)" if stage == "generate" else "")] = _stats(vals)
    return out


def format_table(res: RetrieveBenchResult) -> str:
    lines = [f"repocomp bench retrieve: {res.repo}",
             f"{res.files} files, {res.fragments} fragments; {res.positions} positions x {res.runs} runs; "
             f"similarity={res.similarity} alpha={res.alpha} query_relations={res.query_relations} "
             f"definitions={'on' if res.definitions else 'off'}",
             "", f"{'per iteration (ms)':<40}{'p50':>9}{'p95':>9}{'mean':>9}{'max':>9}"]
    for r, s in res.per_iteration_ms.items():
        lines.append(f"{'iteration ' + r + ': retrieval+defs+prompt':<40}{s['p50']:>9.2f}{s['p95']:>9.2f}"
                     f"{s['mean']:>9.2f}{s['max']:>9.2f}")
    lines += ["", f"{'stage (ms, all iterations)':<40}{'p50':>9}{'p95':>9}{'mean':>9}{'max':>9}"]
    for name, s in res.stages_ms.items():
        lines.append(f"{name:<40}{s['p50']:>9.2f}{s['p95']:>9.2f}{s['mean']:>9.2f}{s['max']:>9.2f}")
    lines.append(f"\nfirst request (warm-up included): {res.first_request_ms:.1f} ms")
    return "\n".join(lines)


def _run(args: argparse.Namespace) -> int:
    from repocomp.config.loading import load_config

    root = args.path.expanduser().resolve()
    if not root.is_dir():
        raise RepocompError(f"{args.path}: not a directory")
    if args.runs < 1 or args.positions < 1:
        raise RepocompError("--runs and --positions must be >= 1")
    config = load_config(root, args.config)
    changes: dict[str, Any] = {}
    if args.iterations is not None:
        changes["iterations"] = args.iterations
    if args.similarity:
        changes["similarity"] = args.similarity
    if args.alpha is not None:
        changes["alpha"] = args.alpha
    if args.query_relations is not None:
        changes["query_relations"] = args.query_relations
    if changes:
        config = config.replace("retrieval", **changes)
    if args.no_definitions:
        config = config.replace("definitions", enabled=False)
    told = False

    def progress(done: int, total: int, phase: str) -> None:
        nonlocal told
        if not told:
            print(f"repocomp: indexing {root} first...", file=sys.stderr)
            told = True

    res = run_retrieve_bench(root, config, args.positions, args.runs, args.seed, progress)
    print(json.dumps(asdict(res), indent=2) if args.json else format_table(res))
    return 0
