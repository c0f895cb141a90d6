"""The llamacpp backend on the real local model's GGUF (Qwen2.5-Coder 0.5B, Q4_K_M as shipped)."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.metadata
import threading
from pathlib import Path

import pytest

from repocomp.backends import GenerationRequest, make_backend
from repocomp.backends.llama_cpp import CHUNK, LlamaCppBackend, gguf_path
from repocomp.backends.local_model import LocalModel
from repocomp.config.schema import BackendConfig
from repocomp.errors import BackendError

pytestmark = [pytest.mark.local_model, pytest.mark.slow]

CODE = "".join(f"def step_{i}(state, value):\n    state.total += value * {i}\n    return state\n\n\n" for i in range(12))
PROMPT = f"<|repo_name|>demo\n<|file_sep|>demo/steps.py\n<|fim_prefix|>{CODE}def add(a, b):\n    return " \
         "<|fim_suffix|>\n\n\nprint(add(1, 2))\n<|fim_middle|>"


def req(prompt: str = PROMPT, n: int = 24, key: str | None = None, **kw: object) -> GenerationRequest:
    return GenerationRequest(prompt=prompt, prefix="", suffix="", candidates=(), max_new_tokens=n, cache_key=key,
                             **kw)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def backend(local_model: LocalModel) -> LlamaCppBackend:
    b = LlamaCppBackend(str(local_model.path))
    asyncio.run(b.aload())
    return b


def test_the_prompt_is_tokenized_as_the_models_own_tokenizer_does(backend: LlamaCppBackend,
                                                                   local_model: LocalModel) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(local_model.path)
    assert backend._loaded is not None
    assert backend._loaded.tokenize(PROMPT) == tokenizer(PROMPT)["input_ids"]  # the format's tokens as tokens


async def test_the_models_stop_token_ends_the_answer(backend: LlamaCppBackend) -> None:
    """Qwen2.5-Coder ends this middle with one of its format's tokens (not a text the answer shows)."""
    prompt = PROMPT.replace("\n\n\nprint(add(1, 2))\n", "\n\n\ndef sub(a, b):\n    return a - b\n")
    text, n, at_limit = await asyncio.to_thread(backend._generate, req(prompt, n=48), threading.Event())
    assert 0 < n < 48 and not at_limit and "<|" not in text  # a stop token ended it, not the cap
    assert (await backend.agenerate(req(prompt, n=48))).text == text


async def test_the_token_cap_and_a_stop_sequence(backend: LlamaCppBackend) -> None:
    _, n, _ = await asyncio.to_thread(backend._generate, req(n=2), threading.Event())
    assert n == 2
    assert (await backend.agenerate(req(n=48, stop=("+",)))).text.strip() == "a"


async def test_a_reused_prefix_gives_the_answer_a_fresh_prompt_gives(backend: LlamaCppBackend) -> None:
    """Typing at the end of the prompt: the second request reuses the first's keys and values up to an aligned
    chunk, and answers what the same prompt answers from nothing."""
    typed = PROMPT.replace("    return <|fim_suffix|>", "    return a<|fim_suffix|>")
    fresh = (await backend.agenerate(req(typed, n=12))).text
    before = backend.stats()["prefix_cache"]
    await backend.agenerate(req(PROMPT, n=12, key="doc"))
    reused = (await backend.agenerate(req(typed, n=12, key="doc"))).text
    after = backend.stats()["prefix_cache"]
    assert reused == fresh
    assert after["hits"] == before["hits"] + 1
    assert backend._loaded is not None
    first, second = backend._loaded.tokenize(PROMPT), backend._loaded.tokenize(typed)
    shared = next(i for i, (a, b) in enumerate(zip(first, second)) if a != b)
    assert after["reused_tokens"] - before["reused_tokens"] == shared // CHUNK * CHUNK > 0  # up to a chunk boundary
    assert (await backend.agenerate(req(typed, n=12, key="other"))).text == fresh  # another key reuses nothing
    assert backend.stats()["prefix_cache"]["hits"] == after["hits"]


async def test_cancelling_a_request_stops_its_generation(backend: LlamaCppBackend) -> None:
    long = req(CODE + "def step_99(", n=200)
    _, n_full, _ = await asyncio.to_thread(backend._generate, long, threading.Event())
    assert n_full == 200  # left alone, the model writes code to the cap
    cancelled = threading.Event()
    done: list[int] = []
    worker = threading.Thread(target=lambda: done.append(backend._generate(long, cancelled)[1]))
    worker.start()
    await asyncio.sleep(1.0)
    cancelled.set()  # what agenerate does when its request is cancelled
    await asyncio.to_thread(worker.join, 120.0)
    assert not worker.is_alive() and done[0] < n_full // 2  # it stopped at the flag, long before the cap
    task = asyncio.create_task(backend.agenerate(long))
    await asyncio.sleep(0.5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_the_time_limit_keeps_the_text_so_far(backend: LlamaCppBackend) -> None:
    limited = dataclasses.replace(req(CODE + "def step_99(", n=2000), max_time_s=0.3)
    answer = await backend.agenerate(limited)
    assert answer.at_time_limit and answer.text


async def test_a_missing_model_or_runtime_is_a_backend_error_and_the_fallback_answers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(BackendError, match="repocomp model prepare"):
        gguf_path(str(tmp_path))
    answer = await make_backend(BackendConfig(name="llamacpp", model=str(tmp_path))).agenerate(
        GenerationRequest(prompt="x = 1\n", prefix="x = 1\n", suffix="", candidates=("x = 1\ny = 2\n",),
                          max_new_tokens=8))
    assert answer.fell_back and "repocomp model prepare" in answer.error

    from repocomp.backends import llama_runtime

    def absent(name: str) -> None:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", absent)
    with pytest.raises(BackendError, match="pip install --no-deps llama-cpp-cffi==0.4.42"):
        llama_runtime.library_path()
