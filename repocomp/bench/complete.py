"""`repocomp bench complete PATH`: end-to-end latency of a completion with a real model (the local one by default).

Cursor positions are drawn (seeded) as in `bench retrieve`: after the indentation of a code line, the code above
as context, like a RepoEval line hole. Each position is completed once through `Completer.acomplete`, the entry
point the CLI and the language server use, in RepoCoder mode at the configured budget: every round's retrieval,
prompt and generation count. Loading the model, its tokenizer and a warm-up generation (as the language server
does at start) is timed apart; the first request after it is reported beside the median. The CPU's flags are printed so that
figures of different machines are never mixed; `--json` lists every answer, so that two runs (an idle machine and
a busy one) can be compared answer by answer (with `--typing`, the typed requests' answers too).

`--typing K` then types the next K characters of each position's line one at a time, a request after each, as a
language server sends them (the document as cache key): their latency, how many reused the prompt prefix the
model computed for the previous keystroke (the in-process models reuse it up to a chunk boundary), how many
prompts repeated the previous one up to the cursor's line (so that only the code from there on is new: the typed
text and, with fill-in-the-middle, the code after the cursor), and how many tokens followed the common prefix.
Where the backend measures it (openvino), the table also says where the model's time went: per request, the time to
its first token (the prefill of what the prefix cache did not hold) and the decoded tokens with their time each.

`--editor` asks as an editor does while a developer writes a new line: each position's line is emptied to its
indentation (the developer pressed Enter; the rest of the file stays below), the first request is made there, then
the line's characters are typed one at a time (all of them, or `--typing K`). A typed character that the shown
suggestion continues with is served from it with no model call (as the language server serves it); one that
departs from it makes a new request, whose answer is shown from then on. The table gives the first requests'
latency, the requests the typing made, how many keystrokes the suggestion served, and how many first suggestions
were the developer's line exactly. `--lines N` writes N lines from each position on, one after another (each
emptied, asked at, typed; the code below them stays): the first requests at the lines below the position are
timed apart, as a developer writing on in a file meets them. `--prefetch` has the developer pause on the line above
each position first, the line not yet written, as the language server's prefetch sees it (`repocomp/prefetch`):
the engine lays the context of that line's end and computes its prompt into the model's cache, then the
position's line is opened below and asked at; the table gives the prefetches' time beside the requests'.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from repocomp.bench.retrieve import _positions, _stats
from repocomp.config.schema import BACKEND_NAMES
from repocomp.errors import RepocompError

__all__ = ["CompleteBenchResult", "register", "run_complete_bench"]


@dataclass
class CompleteBenchResult:
    repo: str
    backend: str  # the backend that answered
    model: str
    positions: int
    iterations: int
    prompt_budget: int
    max_time_s: float  # generation time limit of a round (0: none)
    max_new_tokens: int  # the token cap of a round
    cpu: str  # the CPU's matrix flags that decide its speed (AMX, AVX-512 BF16, AVX2)
    request_ms: dict[str, float] = field(default_factory=dict)  # p50/p95/mean/max over requests
    generate_ms: dict[str, float] = field(default_factory=dict)  # per round
    prompt_tokens: dict[str, float] = field(default_factory=dict)
    load_ms: float = 0.0  # model load and its warm-up generation
    first_request_ms: float = 0.0  # the first request after the load (also counted in request_ms)
    failures: int = 0  # requests answered by the fallback (backend errors)
    at_time_limit: int = 0  # generations stopped by max_time_s (their text so far was the answer)
    answers: list[str] = field(default_factory=list)  # per position, in order
    typing_ms: dict[str, float] = field(default_factory=dict)  # requests after each typed character (--typing)
    cache: dict[str, float] = field(default_factory=dict)  # the backend's prefix reuse (requests, hits, tokens)
    output_head: dict[str, float] = field(default_factory=dict)  # the fast output head's steps (accepted, fallbacks)
    # where the model's time went, where the backend says (first_token_ms and decode_ms summed, decoded_tokens)
    model_time: dict[str, float] = field(default_factory=dict)
    typed_answers: list[str] = field(default_factory=list)  # the typed requests' answers, in order (--typing)
    typed_same_to_cursor: int = 0  # typed prompts that repeat the previous one up to the cursor's line
    typed_new_tokens: dict[str, float] = field(default_factory=dict)  # prompt tokens after that common prefix
    editor: bool = False  # --editor: request_ms are the first requests at an emptied line, typing_ms the later ones
    keystrokes: int = 0  # --editor: characters typed after the first requests
    typed_through: int = 0  # --editor: keystrokes the shown suggestion continued with (no model call)
    first_right: int = 0  # --editor: first suggestions that were the developer's line exactly
    lines_asked: int = 0  # --editor: lines with a first request (the positions' and, with --lines, those below)
    line_right: list[bool] = field(default_factory=list)  # --editor: per line asked, in order (runs pair by it)
    next_line_ms: dict[str, float] = field(default_factory=dict)  # --lines: first requests at the lines below
    prefetch: bool = False  # --prefetch: each position's line was prefetched from the line above before its request
    prefetch_ms: dict[str, float] = field(default_factory=dict)  # --prefetch: the prefetches' time (the model's)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("complete", help="end-to-end completion latency with a real model",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("path", type=Path, help="repository root (indexed first if needed)")
    p.add_argument("--positions", type=int, default=40, help="cursor positions (default 40)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--backend", choices=BACKEND_NAMES, help="override [backend] name (default: config, auto)")
    p.add_argument("--endpoint", help="vLLM base URL (with --backend vllm)")
    p.add_argument("--iterations", type=int,
                   help="RepoCoder rounds (default: the model's, see repocomp.backends.model_defaults)")
    p.add_argument("--typing", type=int, default=0, metavar="K",
                   help="after each position, type its next K characters, a request after each (default 0)")
    p.add_argument("--editor", action="store_true",
                   help="empty each position's line, ask there, then type it (see above); --typing K: its first K "
                        "characters (default: the whole line)")
    p.add_argument("--lines", type=int, default=1, metavar="N",
                   help="with --editor: write N lines from each position on, one after another (default 1)")
    p.add_argument("--prefetch", action="store_true",
                   help="with --editor: prefetch from the line above each position before its request (see above)")
    p.add_argument("--config", type=Path, metavar="FILE")
    p.add_argument("--json", action="store_true", help="print the result as JSON instead of a table")
    p.set_defaults(run=_run)


def cpu_flags() -> str:
    """The CPU's flags that decide a model's speed on it, as /proc/cpuinfo names them ("unknown" elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            flags = next((line.split(":", 1)[1].split() for line in fh if line.startswith("flags")), [])
    except OSError:
        return "unknown"
    shown = [name for name, flag in (("AMX", "amx_bf16"), ("AVX-512 BF16", "avx512_bf16"), ("AVX-512", "avx512f"),
                                     ("AVX2", "avx2")) if flag in flags]
    return ", ".join(shown) or "none of AMX, AVX-512, AVX2"


@dataclass(frozen=True)
class _Typed:
    ms: float
    answer: str
    same_to_cursor: bool  # the prompt repeats the previous one up to the cursor's line
    new_tokens: int  # prompt tokens after the common prefix with the previous prompt


def _typed(ms: float, answer: str, prompt: str, previous: str, above: str, line: str, count: Any) -> _Typed:
    """One typed request's figures: `above` is a few lines above the cursor's, `line` the cursor's line up to the
    cursor (both end the in-file context: where they are in the prompt says where the cursor's line starts)."""
    shared = len(os.path.commonprefix([prompt, previous]))
    at = prompt.rfind(above + line)
    return _Typed(ms, answer, at >= 0 and shared >= at + len(above), count(prompt[shared:]))


@dataclass
class _Typing:
    """The keystrokes after the positions' first requests."""

    requests: list[_Typed] = field(default_factory=list)  # those that asked the model
    keys: int = 0  # --editor: all of them
    through: int = 0  # --editor: those the shown suggestion served
    right: list[bool] = field(default_factory=list)  # --editor: per line asked, whether its first suggestion was it
    next_lines: list[float] = field(default_factory=list)  # --lines: the first requests' ms at the later lines
    prefetches: list[float] = field(default_factory=list)  # --prefetch: each prefetch's ms


async def _type_lines(completer: Any, path: str, text: str, line: int, n_lines: int, typing: int, count: Any,
                      typed: _Typing, prefetch: bool = False) -> Any:
    """--editor at one position: `n_lines` lines from `line` on written one after another, each emptied to its
    indentation and asked there, then typed (`typing` characters, 0: all); the code below them stays. With
    `prefetch`, first a prefetch from the line above, the lines not yet written. The first request's result (the
    position's)."""
    from repocomp.pipeline import CompletionOptions

    lines = text.split("\n")
    end = min(line + n_lines, len(lines))
    if prefetch and line > 0:
        t0 = time.perf_counter()
        await completer.acomplete(path, "\n".join([*lines[:line], *lines[end:]]), line - 1, len(lines[line - 1]),
                                  CompletionOptions(kind="line", cache_key=path, prefill=True))
        typed.prefetches.append((time.perf_counter() - t0) * 1e3)
    position = None
    for at in range(line, end):
        target = lines[at]
        col = len(target) - len(target.lstrip())
        if at > line and not target.strip():
            continue  # a blank line: the developer presses Enter again
        above = "".join(f"{t}\n" for t in lines[max(0, at - 3):at])

        async def ask(k: int, at: int = at, target: str = target, col: int = col) -> tuple[Any, float]:
            buffer = "\n".join([*lines[:at], target[:col + k], *lines[end:]])
            t0 = time.perf_counter()  # the language server's options: the cursor's line, the document's key
            res = await completer.acomplete(path, buffer, at, col + k, CompletionOptions(kind="line", cache_key=path))
            return res, (time.perf_counter() - t0) * 1e3

        first, ms = await ask(0)
        if position is None:
            position = first
        else:
            typed.next_lines.append(ms)
        typed.right.append(bool(target[col:].strip())
                           and first.text.split("\n", 1)[0].rstrip() == target[col:].rstrip())
        shown, since, previous = first.text, "", first.prompt
        rest = len(target) - col
        for k in range(1, (min(typing, rest) if typing else rest) + 1):
            since += target[col + k - 1]
            typed.keys += 1
            if shown.startswith(since):
                typed.through += 1
                continue
            res, ms = await ask(k)
            typed.requests.append(_typed(ms, res.text, res.prompt, previous, above, target[:col + k], count))
            shown, since, previous = res.text, "", res.prompt
    return position


async def _bench(index: Any, config: Any, positions: list[tuple[str, int, int]], typing: int = 0,
                 editor: bool = False, n_lines: int = 1, prefetch: bool = False) -> tuple[list, float, _Typing, dict[str, dict[str, float]]]:
    """(results, model load and warm-up in ms, the keystrokes after them, the backend's counters: prefix reuse
    under "cache_stats", the output head under "output_head_stats", the model's time after the warm-up under
    "model_time")."""
    from repocomp.backends import load_and_warm, make_backend
    from repocomp.pipeline import Completer, CompletionOptions

    backend = make_backend(config.backend)
    t = time.perf_counter()
    await load_and_warm(backend)
    completer = Completer(index, config, backend)
    completer.count_tokens  # noqa: B018 - the tokenizer loads here, as the language server loads it at start
    load = (time.perf_counter() - t) * 1e3
    warm_up = backend.stats().get("model_time", {})
    texts = {p: "\n".join(index.file_lines(p) or []) for p, _, _ in positions}
    results, typed = [], _Typing()
    try:
        for path, line, col in positions:
            if editor:
                results.append(await _type_lines(completer, path, texts[path], line, n_lines, typing,
                                                 completer.count_tokens, typed, prefetch))
                continue
            results.append(await completer.acomplete(path, texts[path], line, col))
            lines = texts[path].split("\n")
            line_text, above = lines[line], "".join(f"{text}\n" for text in lines[max(0, line - 3):line])
            previous = results[-1].prompt
            for k in range(1, min(typing, len(line_text) - col) + 1):  # the line's own next characters, one at a time
                t0 = time.perf_counter()
                res = await completer.acomplete(path, texts[path], line, col + k, CompletionOptions(cache_key=path))
                ms = (time.perf_counter() - t0) * 1e3
                typed.requests.append(_typed(ms, res.text, res.prompt, previous, above, line_text[:col + k],
                                             completer.count_tokens))
                previous = res.prompt
        stats = backend.stats()  # a fallback's are its primary's
        counters = {"cache_stats": stats.get("prefix_cache", {}), "output_head_stats": stats.get("output_head", {}),
                    "model_time": {k: v - warm_up.get(k, 0) for k, v in stats.get("model_time", {}).items()}}
    finally:
        await completer.aclose()
    return results, load, typed, counters


def run_complete_bench(root: Path, config: Any, positions: int = 40, seed: int = 0,
                       progress: Any = None, typing: int = 0, editor: bool = False,
                       n_lines: int = 1, prefetch: bool = False) -> CompleteBenchResult:
    from repocomp.backends.model_defaults import resolve_config
    from repocomp.index import Index

    config = resolve_config(config)
    index = Index.open(root, config, build=True, progress=progress)
    pos = _positions(index, positions, seed)
    results, load, typing_done, counters = asyncio.run(_bench(index, config, pos, typing, editor, n_lines,
                                                                      prefetch))
    typed = typing_done.requests
    gen = [r.timings_ms[k] for r in results for k in r.timings_ms if k.startswith("generate_")]
    return CompleteBenchResult(
        repo=str(root), backend=results[-1].backend, model=config.backend.model, positions=len(pos),
        iterations=config.retrieval.iterations, prompt_budget=config.prompt.max_tokens,
        max_time_s=config.backend.max_time_s, max_new_tokens=config.backend.max_new_tokens, cpu=cpu_flags(),
        request_ms=_stats([r.timings_ms["total"] for r in results]), generate_ms=_stats(gen),
        prompt_tokens=_stats([r.prompt_tokens for r in results]), load_ms=round(load, 1),
        first_request_ms=round(results[0].timings_ms["total"], 1),
        failures=sum(1 for r in results if r.backend != config.backend.name),
        at_time_limit=sum(rnd.at_time_limit for r in results for rnd in r.rounds),
        answers=[r.text for r in results], typing_ms=_stats([t.ms for t in typed]) if typed else {},
        cache=dict(counters["cache_stats"]), output_head=dict(counters["output_head_stats"]),
        model_time=dict(counters["model_time"]), typed_answers=[t.answer for t in typed], typed_same_to_cursor=sum(t.same_to_cursor for t in typed),
        typed_new_tokens=_stats([t.new_tokens for t in typed]) if typed else {}, editor=editor,
        keystrokes=typing_done.keys, typed_through=typing_done.through, first_right=sum(typing_done.right),
        lines_asked=len(typing_done.right), line_right=typing_done.right,
        next_line_ms=_stats(typing_done.next_lines) if typing_done.next_lines else {}, prefetch=prefetch,
        prefetch_ms=_stats(typing_done.prefetches) if typing_done.prefetches else {})


def format_table(res: CompleteBenchResult) -> str:
    lines = [f"repocomp bench complete: {res.repo}", f"CPU: {res.cpu}",
             f"backend {res.backend} ({res.model or 'server default'}); {res.positions} positions; "
             f"{res.iterations} RepoCoder round(s); prompt budget {res.prompt_budget} tokens; "
             f"at most {res.max_new_tokens} new tokens; "
             f"time limit {f'{res.max_time_s:g} s' if res.max_time_s else 'none'}",
             "", f"{'':<28}{'p50':>10}{'p95':>10}{'mean':>10}{'max':>10}"]
    first, typed = ("first, at the emptied line", "typed, the model asked") if res.editor else \
        ("request (ms)", "typed, a request a key (ms)")
    for name, s in ((first, res.request_ms), ("prefetch, the line above", res.prefetch_ms),
                    ("first, at the lines below", res.next_line_ms),
                    ("generation per round (ms)", res.generate_ms),
                    ("prompt tokens", res.prompt_tokens), (typed, res.typing_ms)):
        if s:
            lines.append(f"{name:<28}{s['p50']:>10.1f}{s['p95']:>10.1f}{s['mean']:>10.1f}{s['max']:>10.1f}")
    if res.editor:
        lines.append(f"keystrokes: {res.keystrokes}, {res.typed_through} served by the suggestion shown "
                     f"({res.typed_through / max(res.keystrokes, 1):.0%}), {res.keystrokes - res.typed_through} asked "
                     "the model; first suggestions that "
                     f"were the line exactly: {res.first_right} of {res.lines_asked}")
    if res.typing_ms:
        lines.append(f"typed prompts the same as the previous one up to the cursor's line: {res.typed_same_to_cursor} "
                     f"of {res.typing_ms['n']:.0f}; tokens after the common prefix p50 "
                     f"{res.typed_new_tokens['p50']:.0f} (max {res.typed_new_tokens['max']:.0f})")
    if res.cache.get("requests"):
        c = res.cache
        lines.append(f"prefix reuse: {c['hits']:.0f} of {c['requests']:.0f} requests hit ({c['hit_rate']:.0%}); "
                     f"{c['reused_tokens']:.0f} prompt tokens reused, {c['prefilled_tokens']:.0f} computed")
    if res.model_time.get("requests"):
        m = res.model_time
        lines.append(f"in the model, per request: {m['first_token_ms'] / m['requests']:.0f} ms to the first token (the "
                     f"prefill of what was not reused), then {m['decoded_tokens'] / m['requests']:.1f} tokens at "
                     f"{m['decode_ms'] / max(m['decoded_tokens'], 1):.1f} ms each")
    if res.output_head:
        h = res.output_head
        lines.append(f"fast output head: {h['accepted']:.0f} tokens certified, {h['fallbacks']:.0f} by the full layer"
                     if h["accepted"] + h["fallbacks"] else "fast output head: off (or not applicable to this model)")
    lines.append(f"\nmodel load and warm-up: {res.load_ms:.0f} ms; first request {res.first_request_ms:.0f} ms "
                 f"({res.first_request_ms / max(res.request_ms['p50'], 1e-9):.2f} x the median); "
                 f"fallback answers: {res.failures}; generations stopped at the time limit: {res.at_time_limit}")
    return "\n".join(lines)


def _run(args: argparse.Namespace) -> int:
    from repocomp.config.loading import load_config

    root = args.path.expanduser().resolve()
    if not root.is_dir():
        raise RepocompError(f"{args.path}: not a directory")
    if args.positions < 1:
        raise RepocompError("--positions must be >= 1")
    config = load_config(root, args.config)
    if args.backend:
        config = config.replace("backend", name=args.backend)
    if args.endpoint:
        config = config.replace("backend", vllm={"endpoints": (args.endpoint,)})
    if args.iterations is not None:
        config = config.replace("retrieval", iterations=args.iterations)

    def progress(done: int, total: int, phase: str) -> None:
        if done == 0:
            print(f"repocomp: indexing {root} first...", file=sys.stderr)

    if not 0 <= args.typing <= 1000:
        raise RepocompError(f"--typing must be in 0..1000, got {args.typing}")
    if not 1 <= args.lines <= 1000 or (args.lines > 1 and not args.editor):
        raise RepocompError(f"--lines must be in 1..1000 and goes with --editor, got {args.lines}")
    if args.prefetch and not args.editor:
        raise RepocompError("--prefetch goes with --editor")
    res = run_complete_bench(root, config, args.positions, args.seed, progress, args.typing, args.editor,
                             args.lines, args.prefetch)
    if res.backend == "extractive":
        print("repocomp: warning: answered by the extractive backend, not a model (see `repocomp model prepare`)",
              file=sys.stderr)
    print(json.dumps(asdict(res), indent=2) if args.json else format_table(res))
    return 0
