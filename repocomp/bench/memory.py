"""`repocomp bench memory`: the session memory controller's cost, `SessionMemory.select` timed over a session of
many hunks (1,000 by default: 200 in the queue, the rest in recall storage), at random places of 20 open files."""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable

from repocomp.memory.events import TextEdit
from repocomp.memory.session import SessionMemory
from repocomp.tokenize import code_tokens

__all__ = ["memory_bench", "register", "synthetic_file"]

_NAMES = ("total", "amount", "price", "items", "cart", "order", "user", "account", "balance", "discount", "tax",
          "shipping", "invoice", "customer", "product", "quantity", "coupon", "payment", "refund", "ledger")


def synthetic_file(rng: random.Random, n_funcs: int = 30) -> str:
    """Real-looking Python: functions over a small vocabulary of shop names."""
    out = []
    for k in range(n_funcs):
        a, b, c = rng.sample(_NAMES, 3)
        out += [f"def {a}_{b}_{k}({a}, {b}):", f'    """Compute the {c} of the {a}."""',
                f"    {c} = {a}.{b} * {rng.randint(2, 9)}", f"    for item in {a}.items:",
                f"        {c} += item.{b}", f"    return {c}", ""]
    return "\n".join(out) + "\n"


def memory_bench(n_hunks: int = 1000, requests: int = 300, max_hunks: int | None = None, budget_tokens: int = 256,
                 relation: bool = True, seed: int = 0,
                 count_tokens: Callable[[str], int] | None = None) -> dict[str, float]:
    """p50/p95/max ms (wall clock; `cpu_*`: the thread's CPU time, which a loaded machine disturbs less) of `select` in a session holding `n_hunks` hunks (the queue's `max_hunks`, default the
    config's 200, the rest in recall storage; every other hunk retypes a line), `requests` requests at random places
    of 20 open files, a third of them where a line was retyped lately (the code replaced at the cursor is shown)."""
    from repocomp.config.schema import MemoryConfig

    rng = random.Random(seed)
    cfg = MemoryConfig(enabled=True, persist=False, relations=relation,
                       max_hunks=max_hunks or MemoryConfig().max_hunks,
                       max_bytes=max(MemoryConfig().max_bytes, 600 * n_hunks))
    mem = SessionMemory(None, cfg)
    files = {f"shop/mod{i}.py": synthetic_file(rng).split("\n") for i in range(20)}
    t = 1_700_000_000.0
    for p, lines in files.items():
        mem.opened(p, "\n".join(lines), t)
    paths = list(files)
    made = 0
    retyped: list[tuple[str, int]] = []
    t_edit = time.perf_counter()
    while made < n_hunks:  # each hunk: a new line typed (as a few keystroke edits) at a place far from others
        p = rng.choice(paths)
        lines = files[p]
        ln = rng.randrange(len(lines) - 1)
        a, b = rng.sample(_NAMES, 2)
        new = f"    {a} = {b}.{rng.choice(_NAMES)}({a}, {rng.randint(0, 99)})"
        t += rng.uniform(1.0, 20.0)
        if made % 2 and lines[ln].strip():  # every other hunk retypes a line: the code it replaced is remembered
            mem.edited(TextEdit(p, ln, 0, ln, len(lines[ln]), lines[ln], "", t))
            lines[ln] = ""
            retyped.append((p, ln))
        else:
            mem.edited(TextEdit(p, ln, 0, ln, 0, "", "\n", t))
            lines.insert(ln, "")
        for k in range(0, len(new), 8):  # typed in a few chunks
            t += 0.2
            mem.edited(TextEdit(p, ln, k, ln, k, "", new[k:k + 8], t))
        lines[ln] = new
        st = mem.stats()
        made = st["hunks"] + st["recall_hunks"]  # a line typed next to another joins its hunk
    edit_s = time.perf_counter() - t_edit
    counter = count_tokens or (lambda s: len(code_tokens(s)))
    rel = (lambda p1, l1, p2, l2: 0.6 if p1 == p2 else (0.2 if (hash(p1) ^ hash(p2)) % 3 == 0 else 0.0)) \
        if relation else None
    times, cpu = [], []
    consulted = replaced = 0
    for i in range(requests):
        p = rng.choice(paths)
        ln = rng.randrange(1, len(files[p]))
        if i % 3 == 0 and retyped:  # a third of the requests where a line was retyped lately (places shift a bit)
            p, ln = rng.choice(retyped[-50:])
        lines = files[p]
        prefix = lines[max(0, ln - 40):ln]
        c0, t0 = time.thread_time(), time.perf_counter()
        d = mem.select(p, ln, prefix, budget_tokens, counter, rel)
        times.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.thread_time() - c0) * 1000)
        consulted += d.consulted
        replaced += bool(d.entries) and d.entries[0].kind == "replaced"
    times.sort()
    cpu.sort()
    st = mem.stats()
    return {"n_hunks": float(n_hunks), "queue_hunks": float(st["hunks"]), "recall_hunks": float(st["recall_hunks"]),
            "thoughts": float(st["thoughts"]), "requests": float(requests),
            "p50_ms": statistics.median(times), "p95_ms": times[min(len(times) - 1, int(0.95 * len(times)))],
            "max_ms": times[-1], "cpu_p50_ms": statistics.median(cpu),
            "cpu_p95_ms": cpu[min(len(cpu) - 1, int(0.95 * len(cpu)))], "consulted": consulted / requests,
            "replaced": replaced / requests,
            "edit_us": edit_s / max(1, st["edits"]) * 1e6}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("memory", help="session memory: the controller's time per request over many hunks",
                       description=__doc__)
    p.add_argument("--hunks", type=int, default=1000, help="hunks in the session (default 1000)")
    p.add_argument("--requests", type=int, default=300, help="requests to time (default 300)")
    p.add_argument("--queue", type=int, help="hunks kept in the queue (default: the config's 200)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    from repocomp.errors import RepocompError

    if not 1 <= args.hunks <= 100_000 or not 1 <= args.requests <= 100_000:
        raise RepocompError("--hunks and --requests must be in 1..100000")
    r = memory_bench(n_hunks=args.hunks, requests=args.requests, max_hunks=args.queue)
    if args.json:
        print(json.dumps(r, indent=2))
        return 0
    print(f"repocomp bench memory: {r['n_hunks']:.0f} hunks ({r['queue_hunks']:.0f} in the queue, "
          f"{r['recall_hunks']:.0f} in recall storage), {r['thoughts']:.0f} thoughts; {r['requests']:.0f} requests, "
          f"{r['consulted']:.0%} consulted")
    print(f"(half the hunks retype a line; a third of the requests are where one was retyped: {r['replaced']:.0%} "
          "were shown the code replaced at the cursor)")
    print(f"select (ms)   wall p50 {r['p50_ms']:.2f}  p95 {r['p95_ms']:.2f}  max {r['max_ms']:.2f}   "
          f"CPU p50 {r['cpu_p50_ms']:.2f}  p95 {r['cpu_p95_ms']:.2f}")
    print(f"per edit: {r['edit_us']:.0f} us")
    return 0
