"""`repocomp bench prefill`: what a prompt's split costs and whether prefix reuse stays exact, on this CPU.

A request that reuses a cached prefix prefills only the rest of its prompt, a split the fresh prefill of the same
prompt never made, and a split can round differently (bf16 on CPUs with native bf16 kernels; float32 at a few
positions on an AVX2 CPU), so the in-process backend prefills every prompt in chunks aligned at absolute positions
and reuses a cache only up to a chunk boundary (repocomp/backends/prefix_cache.py). This prints, for one prompt of
`--tokens` tokens of this project's source and a second one that shares all but its last 50:

- split sensitivity: the second prompt's next-token logits after reusing the first one's cache cut at a few
  places, against one unsplit prefill (the largest difference, and whether the greedy token changed);
- for each chunk size: whether reusing an aligned cut gives the fresh chunked prefill's logits bit for bit, and
  how far the chunked prefill is from the unsplit one;
- the cost: a cold prefill unsplit and in each chunk size (fastest and median of `--reps`), a typed request that
  reuses what each rule allows, and one decoding step;
- the floor under a cold prefill: the FLOPs of the layers' matrix products for the prompt, over the rate this CPU
  reaches on one product of the model's shapes (tokens x hidden times hidden x the MLP's width).

`--random-weights` builds the model from its config with random weights (a machine without the prepared model):
the arithmetic, and so the splits' effect and the costs, is the model's; its logits are not.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from repocomp.bench.complete import cpu_flags
from repocomp.errors import RepocompError

__all__ = ["prefill_bench", "register"]

CHUNKS = (128, 256, 512)
_TAIL = 50  # tokens the second prompt does not share with the first


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("prefill", help="prefill splits: exactness of prefix reuse and chunk costs",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, help="model folder (default: the prepared local model)")
    p.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16")
    p.add_argument("--tokens", type=int, default=950, help="prompt length in tokens (default 950)")
    p.add_argument("--reps", type=int, default=5, help="timed repetitions (default 5)")
    p.add_argument("--random-weights", action="store_true", help="the model's config with random weights")
    p.add_argument("--json", action="store_true", help="print the result as JSON instead of a table")
    p.set_defaults(run=_run)


def _load(model_dir: Path, dtype: Any, random_weights: bool) -> tuple[Any, Any]:
    import torch
    import transformers

    from repocomp.backends.hf_attention import register as blocked

    tokenizer = None
    if (model_dir / "tokenizer.json").exists() or (model_dir / "tokenizer_config.json").exists():
        tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    if random_weights:
        config = transformers.AutoConfig.from_pretrained(model_dir, local_files_only=True)
        config._attn_implementation = blocked()
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(config).to(dtype)
    else:
        model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True, dtype=dtype,
                                                                  attn_implementation=blocked())
    return model.eval(), tokenizer


def _prompts(tokenizer: Any, vocab: int, n: int) -> tuple[Any, Any]:
    """(first, second), (1, n) each: this project's source (random ids without a tokenizer), the second sharing all
    but its last `_TAIL` tokens."""
    import torch

    if tokenizer is not None:
        text = "".join(p.read_text(encoding="utf-8") for p in sorted(Path(__file__).parents[1].rglob("*.py")))
        ids = tokenizer(text, return_tensors="pt").input_ids[:, :n + _TAIL]
        if ids.shape[1] < n + _TAIL:
            raise RepocompError(f"--tokens {n}: the source holds only {ids.shape[1] - _TAIL}")
    else:
        ids = torch.randint(10, vocab, (1, n + _TAIL), generator=torch.Generator().manual_seed(1))
    first = ids[:, :n]
    second = torch.cat([ids[:, :n - _TAIL], ids[:, n:]], 1)
    return first, second


def prefill_bench(model: Any, first: Any, second: Any, reps: int = 5) -> dict[str, Any]:
    """The figures of the module's docstring for a loaded model and two prompts sharing a prefix."""
    import torch

    from repocomp.backends import prefix_cache as pc

    def logits(ids: Any, cache: Any, reused: int, chunk: int | None) -> Any:
        return pc.next_logits(model, ids, cache, reused, chunk)

    def timed(fn: Callable[[], Any]) -> list[float]:
        out = []
        for _ in range(reps):
            t = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t) * 1e3)
        return out

    n, common = second.shape[1], pc.common_prefix(first[0], second[0])
    res: dict[str, Any] = {"tokens": n, "shared": common, "dtype": str(model.dtype).replace("torch.", ""),
                           "cpu": cpu_flags(), "threads": torch.get_num_threads()}
    with torch.inference_mode():
        logits(first[:, :64], pc.empty_cache(), 0, None)  # warm the kernels
        full = pc.empty_cache()
        logits(first, full, 0, None)
        one = logits(second, pc.empty_cache(), 0, None)
        res["split"] = []
        for cut in sorted({n // 5, n // 2, common - 1, common}):
            out = logits(second, pc.cut(full, cut), cut, None)
            res["split"].append({"cut": cut, "max_abs_diff": round(float((out - one).abs().max()), 4),
                                 "same_token": bool(out.argmax() == one.argmax())})

        res["chunks"], caches = [], {}
        for size in CHUNKS:
            caches[size] = pc.empty_cache()
            logits(first, caches[size], 0, size)
            fresh = logits(second, pc.empty_cache(), 0, size)
            cut = pc.reusable(common, first.shape[1], size)
            again = logits(second, pc.cut(caches[size], cut), cut, size)
            res["chunks"].append({"chunk": size, "reused": cut,
                                  "bitwise_equal": bool(torch.equal(again, fresh)),
                                  "vs_unsplit": round(float((fresh - one).abs().max()), 4)})
        cold: dict[str, list[float]] = {}
        rules: list[int | None] = [None, *CHUNKS]
        for _ in range(reps):  # interleaved: a noisy machine disturbs every rule alike
            for rule in rules:
                t = time.perf_counter()
                logits(second, pc.empty_cache(), 0, rule)
                cold.setdefault(str(rule or "unsplit"), []).append((time.perf_counter() - t) * 1e3)
        res["cold_ms"] = {k: {"min": round(min(v)), "median": round(statistics.median(v))} for k, v in cold.items()}
        res["typed_ms"] = {}
        for rule in rules:
            cut, cache = (common, full) if rule is None else (pc.reusable(common, first.shape[1], rule), caches[rule])

            def typed_request(rule: int | None = rule, cut: int = cut, cache: Any = cache) -> None:
                logits(second, pc.cut(cache, cut), cut, rule)

            res["typed_ms"][str(rule or "unsplit")] = {"reused": cut, "median": round(statistics.median(
                timed(typed_request)))}
        step = timed(lambda: logits(second, pc.cut(full, n - 1), n - 1, None))
        res["decode_step_ms"] = round(statistics.median(step))
        res["floor"] = _prefill_floor(model, n, timed)
    return res


def _prefill_floor(model: Any, n: int, timed: Callable[[Callable[[], Any]], list[float]]) -> dict[str, float]:
    """The layers' matrix products for `n` tokens (every Linear but the output layer, which a prefill applies to
    one position) in GFLOP, the best rate of this CPU's product of the model's shapes, and their quotient."""
    import torch

    head = model.get_output_embeddings()
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear) and m is not head]
    gflop = sum(2 * n * m.in_features * m.out_features for m in linears) / 1e9
    widest = max(linears, key=lambda m: m.out_features)  # the MLP's up projection: most of the work
    x = torch.randn(n, widest.in_features, dtype=model.dtype)
    w = torch.randn(widest.out_features, widest.in_features, dtype=model.dtype)
    torch.nn.functional.linear(x, w)  # warm
    ms = min(timed(lambda: torch.nn.functional.linear(x, w)))
    rate = 2 * n * widest.in_features * widest.out_features / (ms / 1e3) / 1e9
    return {"gflop": round(gflop, 1), "gflops": round(rate, 1), "ms": round(gflop / rate * 1e3)}


def format_table(res: dict[str, Any]) -> str:
    lines = [f"prefill of {res['tokens']} tokens ({res['shared']} shared with the cached prompt), {res['dtype']}, "
             f"{res['threads']} threads; CPU: {res['cpu']}",
             "reuse cut anywhere, against one unsplit prefill: " + "; ".join(
                 f"at {s['cut']}: max |d logit| {s['max_abs_diff']}, {'same' if s['same_token'] else 'OTHER'} token"
                 for s in res["split"])]
    for c in res["chunks"]:
        lines.append(f"chunks of {c['chunk']}: reuse of {c['reused']} bit for bit the fresh prefill: "
                     f"{'yes' if c['bitwise_equal'] else 'NO'}; against unsplit: max |d logit| {c['vs_unsplit']}")
    lines.append("| rule | cold prefill min / median (ms) | typed request: reused, median (ms) |")
    lines.append("|---|---:|---:|")
    for name, cold in res["cold_ms"].items():
        t = res["typed_ms"][name]
        lines.append(f"| {'unsplit, any cut' if name == 'unsplit' else 'chunks of ' + name} | "
                     f"{cold['min']} / {cold['median']} | {t['reused']}, {t['median']} |")
    lines.append(f"one decoding step: {res['decode_step_ms']} ms")
    f = res["floor"]
    lines.append(f"the floor under a cold prefill: the layers' matrix products are {f['gflop']} GFLOP, this CPU "
                 f"computes the model's widest one at {f['gflops']} GFLOPS: {f['ms']} ms")
    return "\n".join(lines)


def _run(args: argparse.Namespace) -> int:
    import torch

    from repocomp.backends.local_model import default_model_dir

    model_dir = (args.model or default_model_dir()).expanduser()
    if not (model_dir / "config.json").is_file():
        raise RepocompError(f"{model_dir}: no model config there; run `repocomp model prepare` or pass --model")
    if not 2 * _TAIL <= args.tokens <= 8192 or not 1 <= args.reps <= 100:
        raise RepocompError(f"--tokens must be in {2 * _TAIL}..8192 and --reps in 1..100")
    dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}[args.dtype]
    model, tokenizer = _load(model_dir, dtype, args.random_weights)
    first, second = _prompts(tokenizer, model.config.vocab_size, args.tokens)
    res = prefill_bench(model, first, second, args.reps)
    print(json.dumps(res, indent=2) if args.json else format_table(res))
    return 0
