"""The transformers backend on the tiny locally built model (random weights: structure, not content)."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import threading
import time
from pathlib import Path

import pytest

from repocomp.backends import GenerationRequest, make_backend
from repocomp.backends.hf import TransformersBackend
from repocomp.config.schema import BackendConfig
from repocomp.errors import BackendError


@pytest.fixture(scope="module", autouse=True)
def _needs_torch() -> None:
    # Not a skip: CI must run these. Torch comes from the CPU wheel index (see .ci/setup), never a CUDA build.
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("transformers") is None:
        pytest.fail("the transformers backend tests need torch and transformers: run `bash .ci/setup` "
                    "(or pip install torch --index-url https://download.pytorch.org/whl/cpu transformers)",
                    pytrace=False)


PROMPT = "def read_lines(path):\n    with open(path) as fh:\n        return"


def req(n: int, stop: tuple[str, ...] = ()) -> GenerationRequest:
    return GenerationRequest(prompt=PROMPT, prefix=PROMPT, suffix="", candidates=(), max_new_tokens=n, stop=stop)


@pytest.fixture(scope="module")
def hf_backend(tiny_model_dir: Path) -> TransformersBackend:
    return TransformersBackend(model=str(tiny_model_dir), device="cpu")


async def test_deterministic_and_exact_token_count(hf_backend: TransformersBackend) -> None:
    a = await hf_backend.agenerate(req(12))
    b = await hf_backend.agenerate(req(12))
    assert a.backend == "transformers" and a.text and a == b
    text, n, _ = hf_backend._generate(req(12), threading.Event())
    assert n == 12 and text == a.text  # exactly max_new_tokens: the tiny model never picks EOS greedily
    _, n5, _ = hf_backend._generate(req(5), threading.Event())
    assert n5 == 5


async def test_stop_sequence(hf_backend: TransformersBackend) -> None:
    full = (await hf_backend.agenerate(req(24))).text
    k = next(i for i in range(3, len(full) - 2) if full[i:i + 2].strip() and full.find(full[i:i + 2]) == i)
    stopped = (await hf_backend.agenerate(req(24, stop=(full[k:k + 2],)))).text
    assert stopped == full[:k]


async def test_generation_stops_at_its_time_limit_with_the_text_so_far(hf_backend: TransformersBackend) -> None:
    await hf_backend._ensure_loaded()
    limited = dataclasses.replace(req(1500), max_time_s=0.02)  # prompt lookup makes 1,500 tokens take < 0.4 s
    t0 = time.monotonic()
    text, n, at_limit = hf_backend._generate(limited, threading.Event())
    took = time.monotonic() - t0
    # far fewer than 1500 tokens, and exactly what an unlimited generation of n tokens gives (a prefix, not noise)
    assert 0 < n < 1500 and took < 5.0 and at_limit
    assert hf_backend._generate(req(n), threading.Event())[:3:2] == (text, False)
    answer = await hf_backend.agenerate(limited)
    assert answer.text and answer.at_time_limit  # the answer is the text so far, not an error


def test_the_time_limit_counts_from_the_first_token(hf_backend: TransformersBackend) -> None:
    # A limit shorter than any step: the prefill's token and one more step (a limit counted from the start of
    # generate, prefill included, would stop after the first token)
    text, n, _ = hf_backend._generate(dataclasses.replace(req(50), max_time_s=1e-6), threading.Event())
    assert n >= 2 and hf_backend._generate(req(n), threading.Event())[0] == text


async def test_cancel_stops_the_worker(hf_backend: TransformersBackend) -> None:
    await hf_backend._ensure_loaded()
    task = asyncio.create_task(hf_backend.agenerate(req(1500)))
    await asyncio.sleep(0.3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # The generation thread saw the flag: the model lock frees long before 1500 tokens would be done.
    lock = hf_backend._loaded.turns.lock
    for _ in range(100):
        if lock.acquire(blocking=False):
            lock.release()
            break
        await asyncio.sleep(0.05)
    else:
        pytest.fail("generation thread kept running after cancel")


async def test_missing_model_is_a_backend_error(tmp_path: Path) -> None:
    b = TransformersBackend(model=str(tmp_path / "nope"))
    with pytest.raises(BackendError, match="cannot load model"):
        await b.agenerate(req(4))


async def test_missing_model_falls_back_to_extractive(tmp_path: Path) -> None:
    backend = make_backend(BackendConfig(name="transformers", model=str(tmp_path / "nope"), fallback="extractive"))
    r = GenerationRequest(prompt="", prefix="x = compute(", suffix="", candidates=("x = compute(1)\n",),
                          max_new_tokens=8)
    gen = await backend.agenerate(r)
    assert gen.backend == "extractive" and gen.text == "1)" and "transformers" in gen.error


async def test_generation_stops_once_the_completion_is_finished(hf_backend: TransformersBackend) -> None:
    full, n_full, _ = hf_backend._generate(req(24), threading.Event())
    seen: list[str] = []

    def finished(text: str) -> bool:
        seen.append(text)
        return len(text) >= 3

    early = GenerationRequest(prompt=PROMPT, prefix=PROMPT, suffix="", candidates=(), max_new_tokens=24,
                              finished=finished)
    text, n, _ = hf_backend._generate(early, threading.Event())
    assert n_full == 24 and n < 24  # stopped as soon as the predicate held, not at max_new_tokens
    assert len(text) >= 3 and full.startswith(text) and seen[-1] == text


async def test_a_load_whose_request_was_cancelled_still_lands(tiny_model_dir: Path) -> None:
    backend = TransformersBackend(model=str(tiny_model_dir), dtype="float32")  # not the module fixture's model
    task = asyncio.create_task(backend.aload())
    await asyncio.sleep(0)  # the load has started in its thread
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(600):  # the thread finishes the load and keeps it
        if backend._loaded is not None:
            break
        await asyncio.sleep(0.05)
    assert backend._loaded is not None and backend._loaded.tokenizer is not None


async def test_backends_of_one_model_loading_at_once_share_one_load(tiny_model_dir: Path) -> None:
    # A language server builds a backend per folder configuration and loads them in the background at once;
    # concurrent transformers loads broke each other (meta tensors), and each would hold its own weights.
    backends = [TransformersBackend(model=str(tiny_model_dir), dtype="bfloat16") for _ in range(3)]
    await asyncio.wait_for(asyncio.gather(*(b.aload() for b in backends)), 300)
    assert all(b._loaded is backends[0]._loaded for b in backends)
    texts = await asyncio.gather(*(b.agenerate(req(8)) for b in backends))
    assert len({t.text for t in texts}) == 1 and texts[0].text
    for b in backends:
        await b.aclose()
    assert b._loaded is None


def test_auto_dtype_is_float32_only_on_a_cpu_without_native_bf16() -> None:
    import torch

    from repocomp.backends.hf import auto_dtype

    assert auto_dtype("cpu", native_bf16=False) is torch.float32
    assert auto_dtype("cpu", native_bf16=True) == "auto"
    assert auto_dtype("cuda", native_bf16=False) == "auto"


async def test_a_bf16_checkpoint_loads_in_the_dtype_this_cpu_runs_fast(tiny_model_dir: Path, tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from repocomp.backends.hf import cpu_has_native_bf16

    AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.bfloat16).save_pretrained(tmp_path)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(tmp_path)
    backend = TransformersBackend(model=str(tmp_path), device="cpu")
    await backend.aload()
    assert backend._loaded is not None
    assert backend._loaded.model.dtype == (torch.bfloat16 if cpu_has_native_bf16() else torch.float32)
    chosen = TransformersBackend(model=str(tmp_path), device="cpu", dtype="bfloat16")
    await chosen.aload()  # an explicit dtype always wins
    assert chosen._loaded is not None and chosen._loaded.model.dtype == torch.bfloat16
