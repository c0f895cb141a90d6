"""`repocomp bench index PATH [--runs N]`: lines, files, per-phase medians of a full index build, peak RSS, relation
storage, and the latency of one-file incremental updates (`repocomp bench monorepo` assembles a large PATH);
`--loaded`: what the stored index takes in memory once loaded, part by part, then after edits and a save.

Each build runs in a fresh subprocess so that its peak RSS is its own.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from repocomp.config.schema import INDEX_BYTES_PER_SOURCE_CHAR

_CHILD = r"""
import json, resource, sys, time
from repocomp.index import Index
from repocomp.index.building import save_built
t = time.perf_counter()
index = Index.build(sys.argv[1], checkpoint=Index.save)  # saved between batches, as `repocomp index` does
save_built(index)  # and at its end, as there
total = time.perf_counter() - t
peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # before the texts are read below
w = index.relations
print(json.dumps({"phases_s": index.summary.phases_s, "total_s": total, "fragments": index.summary.fragments,
                  "files": index.summary.files, "nodes": index.summary.nodes,
                  "lines": sum(e.parsed.n_lines for e in index.files.values()), "warnings": index.summary.warnings,
                  "relation_bytes": int(w.data.nbytes + w.indices.nbytes + w.indptr.nbytes),
                  "index_bytes": index.summary.index_bytes,
                  "chars": sum(len(e.text) for e in index.files.values()), "peak_rss_mb": peak_mb}))
"""


# the resident memory of a loaded index, then each part let go in turn: what it held
_LOADED = r"""
import ctypes, gc, json, sys
from repocomp.index import Index
def rss():
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
start = rss()
index = Index.load(sys.argv[1])
loaded = rss()
parts, last = {}, loaded
def let_go(name, drop):
    global last
    drop()
    now = rss()
    parts[name], last = last - now, now
let_go("term index", lambda: setattr(index, "term_index", None))
let_go("relations (W, its node tables)", lambda: setattr(index, "upkeep", None))
let_go("resolver", lambda: setattr(index, "resolver", None))
let_go("graph", lambda: setattr(index, "graph", None))
let_go("fragments", lambda: setattr(index, "fragments", None))
let_go("parsed files", lambda: [setattr(e, "parse", None) for e in index.files.values()])
let_go("file texts and tables", lambda: setattr(index, "files", None))
print(json.dumps({"loaded_mb": loaded - start, "parts_mb": parts}))
"""


# a process that loads the stored index, edits it as `_updates` does (each edit's relations refreshed, and Eq. 9's
# symmetric W read where FragRel is on, as the next request would then) and saves it: its resident memory at each
# step
_EDITED = r"""
import gc, json, random, resource, sys, tempfile, threading, time
from pathlib import Path
from repocomp.index import heap
from repocomp.bench.index import bench_edit
from repocomp.index import Index
def now():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
def rss():
    gc.collect()
    heap.trim(every_s=0)
    return now()
t = time.perf_counter()
index = Index.load(sys.argv[1])
out = {"load_s": time.perf_counter() - t, "load_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
       "loaded_rss_mb": rss()}
t = time.perf_counter()
index.prepare()  # as the language server does once the index is ready
out["prepare_s"] = time.perf_counter() - t
rng = random.Random(0)
for rel in rng.sample(sorted(index.files), min(int(sys.argv[2]), len(index.files))):
    index.update_file(rel, text=bench_edit(index.files[rel].text, rng))
    index.refresh_relations()
    if index.config.retrieval.alpha:
        index.symmetric_relations
out["edited_rss_mb"] = rss()
with tempfile.TemporaryDirectory() as tmp:
    index.store_dir = Path(tmp)  # saved beside the repository's own index, never over it
    peak, done = [now()], threading.Event()
    def watch():  # the save's own peak (ru_maxrss may be the load's)
        while not done.wait(0.01):
            peak[0] = max(peak[0], now())
    watcher = threading.Thread(target=watch)
    watcher.start()
    t = time.perf_counter()
    index.save()
    out["save_s"] = time.perf_counter() - t
    done.set()
    watcher.join()
    out["save_peak_mb"], out["saved_rss_mb"] = peak[0], rss()
print(json.dumps(out))
"""


def bench_edit(text: str, rng: random.Random) -> str:
    """`text` with a line inserted at a random place: an edit as a user makes it."""
    lines = text.split("\n")
    at = rng.randrange(len(lines))
    return "\n".join(lines[:at] + ["x_benchmark_edit = 1"] + lines[at:])


def loaded_memory(path: Path, edits: int) -> dict:
    """MiB the stored index of `path` takes once loaded, and each part's share; the process's resident memory
    loaded, after `edits` edits and after a save (fresh processes; Linux)."""
    out: dict[str, object] = {}
    for script, args in ((_LOADED, []), (_EDITED, [str(edits)])):
        proc = subprocess.run([sys.executable, "-c", script, str(path), *args], capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"loading the index failed:\n{proc.stderr[-2000:]}")
        out |= json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("index", help="full index build per phase, peak RSS, one-file update latency")
    p.add_argument("path", type=Path)
    p.add_argument("--runs", type=int, default=3, help="full builds (default 3)")
    p.add_argument("--updates", type=int, default=40,
                   help="one-file updates to time (default 40); with --loaded, the edits before the save")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--loaded", action="store_true",
                   help="instead: what the stored index takes in memory once loaded, part by part, then after "
                        "--updates edits and a save")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=run)


def _builds(path: Path, runs: int) -> list[dict]:
    out = []
    for _ in range(runs):
        proc = subprocess.run([sys.executable, "-c", _CHILD, str(path)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"index build failed:\n{proc.stderr[-2000:]}")
        out.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return out


def _updates(path: Path, n: int, seed: int) -> dict:
    from repocomp.index import Index

    index = Index.open(path)
    rng = random.Random(seed)
    files = sorted(index.files)
    times, refresh = [], []
    for rel in rng.sample(files, min(n, len(files))):
        text = index.files[rel].text
        edited = bench_edit(text, rng)
        t = time.perf_counter()
        index.update_file(rel, text=edited)
        times.append(time.perf_counter() - t)
        t = time.perf_counter()
        index.refresh_relations()
        refresh.append(time.perf_counter() - t)
        index.update_file(rel, text=text)
        index.refresh_relations()
    ms = np.array(times) * 1000
    rs = np.array(refresh) * 1000
    return {"update_ms": {"p50": float(np.median(ms)), "p95": float(np.percentile(ms, 95)), "max": float(ms.max())},
            "refresh_ms": {"p50": float(np.median(rs)), "p95": float(np.percentile(rs, 95)), "max": float(rs.max())},
            "updates": len(times)}


def run(args: argparse.Namespace) -> int:
    if args.loaded:
        mem = loaded_memory(args.path, args.updates)
        if args.json:
            print(json.dumps(mem, indent=2))
            return 0
        print(f"bench index --loaded {args.path}: {mem['loaded_mb']:,.0f} MiB once loaded")
        for name, mb in mem["parts_mb"].items():
            print(f"  {name:<32} {mb:8,.0f} MiB")
        print(f"  the process: loaded in {mem['load_s']:.1f} s (peak {mem['load_peak_mb']:,.0f} MiB), "
              f"{mem['loaded_rss_mb']:,.0f} MiB; prepared for edits and requests in {mem['prepare_s']:.1f} s; "
              f"after {args.updates} edits {mem['edited_rss_mb']:,.0f} MiB; "
              f"saved in {mem['save_s']:.1f} s (peak {mem['save_peak_mb']:,.0f} MiB), then "
              f"{mem['saved_rss_mb']:,.0f} MiB")
        return 0
    builds = _builds(args.path, args.runs)
    phases = sorted({k for b in builds for k in b["phases_s"]}, key=list(builds[0]["phases_s"]).index)
    med = {k: statistics.median(b["phases_s"].get(k, 0.0) for b in builds) for k in phases}
    last = builds[-1]
    peak_mb = max(b["peak_rss_mb"] for b in builds)
    result = {
        "path": str(args.path), "runs": args.runs, "lines": last["lines"], "files": last["files"],
        "fragments": last["fragments"], "warnings": last["warnings"],
        "nodes": last["nodes"], "phase_median_s": med,
        "total_median_s": statistics.median(b["total_s"] for b in builds),
        "peak_rss_mb_max": peak_mb, "chars": last["chars"],
        # what `[index] max_memory_mb` assumes a build takes per character it admits, against what this one took
        "peak_bytes_per_char": peak_mb * 2**20 / max(1, last["chars"]),
        "admission_bytes_per_char": INDEX_BYTES_PER_SOURCE_CHAR,
        "relation_bytes_per_fragment": last["relation_bytes"] / max(1, last["fragments"]),
        "index_mb": last["index_bytes"] / 1e6,
    }
    if args.updates > 0:
        result |= _updates(args.path, args.updates, args.seed)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"bench index {result['path']}: {result['lines']:,} lines, {result['files']:,} files, "
          f"{result['fragments']:,} fragments, {result['nodes']:,} nodes, {args.runs} runs (medians)")
    for warning in result["warnings"]:
        print(f"  warning: {warning}")
    for k, v in med.items():
        print(f"  {k:<12} {v:8.3f} s")
    print(f"  {'total':<12} {result['total_median_s']:8.3f} s")
    print(f"  peak RSS     {result['peak_rss_mb_max']:8.0f} MB (max over runs)")
    # the interpreter's fixed share makes a small repository's figure larger; the rule binds on large ones
    print(f"  peak per character {result['peak_bytes_per_char']:.1f} B ({result['chars']:,} characters); "
          f"[index] max_memory_mb admits source at {INDEX_BYTES_PER_SOURCE_CHAR} B per character")
    print(f"  relations    {result['relation_bytes_per_fragment']:8.0f} B/fragment; index {result['index_mb']:.1f} MB")
    if args.updates > 0:
        u, r = result["update_ms"], result["refresh_ms"]
        print(f"  update_file  p50 {u['p50']:.1f} ms, p95 {u['p95']:.1f} ms, max {u['max']:.1f} ms "
              f"({result['updates']} one-file edits)")
        print(f"  refresh      p50 {r['p50']:.1f} ms, p95 {r['p95']:.1f} ms (stale neighbour rows, off the request path)")
    return 0
