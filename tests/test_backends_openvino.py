"""The openvino backend: the model it reads (re-encoded from a GGUF), a missing or corrupt one, and generation
with the real local model (prepared by .ci/setup): prefix reuse gives a fresh prompt's answer, a cancelled request
stops between tokens."""

from __future__ import annotations

import asyncio
import mmap
import os
import re
import threading
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFReader, GGUFWriter
from gguf.quants import dequantize, quantize

from repocomp.backends import GenerationRequest, make_backend
from repocomp.backends.local_model import LocalModel
from repocomp.backends.openvino import OpenVINOBackend, give_back_pages, prefill_pieces
from repocomp.backends.openvino_weights import IR_MODEL, OPENVINO_DIR, requantize, write_openvino_model
from repocomp.config.schema import BackendConfig
from repocomp.errors import BackendError, RepocompError

Q = GGMLQuantizationType


def _write_gguf(path: Path, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A small GGUF of the kinds the catalog's files hold (F32 norms, Q5_0 and Q8_0 matrices); the float weights."""
    writer = GGUFWriter(path, "qwen2")
    writer.add_uint32("general.file_type", 15)  # Q4_K_M
    writer.add_array("tokenizer.ggml.tokens", ["a", "b", "<|endoftext|>"])
    writer.add_string("tokenizer.chat_template", "{{ messages }}")
    weights = {"norm.weight": rng.standard_normal(64).astype(np.float32),
               "q5.weight": rng.standard_normal((8, 64)).astype(np.float32),
               "q8.weight": rng.standard_normal((4, 64)).astype(np.float32)}
    writer.add_tensor("norm.weight", weights["norm.weight"])
    for name, qtype in (("q5.weight", Q.Q5_0), ("q8.weight", Q.Q8_0)):
        data = quantize(weights[name], qtype)
        writer.add_tensor(name, data, raw_shape=data.shape, raw_dtype=qtype)
        weights[name] = dequantize(data, qtype).reshape(weights[name].shape)  # what the file holds
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return weights


def test_requantize_keeps_metadata_and_f32_and_writes_every_matrix_as_q8_0(tmp_path: Path) -> None:
    source = tmp_path / "model.gguf"
    held = _write_gguf(source, np.random.default_rng(0))
    target = requantize(source, tmp_path / "model-q8_0.gguf")
    reader = GGUFReader(target)
    assert reader.fields["general.file_type"].contents() == 7  # the runtime's int8 path
    assert reader.fields["tokenizer.ggml.tokens"].contents() == ["a", "b", "<|endoftext|>"]
    assert reader.fields["tokenizer.chat_template"].contents() == "{{ messages }}"
    tensors = {t.name: t for t in reader.tensors}
    assert tensors["norm.weight"].tensor_type == Q.F32
    np.testing.assert_array_equal(np.asarray(tensors["norm.weight"].data), held["norm.weight"])
    for name in ("q5.weight", "q8.weight"):
        assert tensors[name].tensor_type == Q.Q8_0
        values = dequantize(tensors[name].data, Q.Q8_0).reshape(held[name].shape)
        # Q8_0: a float16 scale per 32 values, 127 steps each side: the second rounding is within half a step plus
        # the scale's own rounding (2**-11 of it, over up to 127 steps)
        step = np.abs(held[name]).reshape(-1, 32).max(axis=1, keepdims=True) / 127
        assert np.all(np.abs(values - held[name]).reshape(-1, 32) <= step * (0.5 + 127 * 2.0**-11) + 1e-6)
    np.testing.assert_array_equal(np.asarray(tensors["q8.weight"].data),
                                  np.asarray({t.name: t for t in GGUFReader(source).tensors}["q8.weight"].data))


def test_a_broken_gguf_says_so_and_leaves_nothing(tmp_path: Path) -> None:
    source = tmp_path / "model.gguf"
    source.write_bytes(b"GGUF" + bytes(100))
    with pytest.raises(RepocompError, match="openvino backend"):
        requantize(source, tmp_path / "model-q8_0.gguf")
    with pytest.raises(RepocompError, match="openvino backend"):
        write_openvino_model(source, tmp_path / OPENVINO_DIR)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.gguf"]


async def test_a_missing_or_corrupt_model_names_the_fix_and_the_fallback_answers(tmp_path: Path) -> None:
    request = GenerationRequest(prompt="def total(items):\n    return ", prefix="def total(items):\n    return ",
                                suffix="", candidates=("def total(items):\n    return sum(items)\n",),
                                max_new_tokens=8)
    with pytest.raises(BackendError, match="repocomp model prepare"):
        await OpenVINOBackend(str(tmp_path)).agenerate(request)
    (tmp_path / OPENVINO_DIR).mkdir()
    (tmp_path / OPENVINO_DIR / IR_MODEL).write_text("not an OpenVINO model at all")
    with pytest.raises(BackendError, match="repocomp model prepare --force"):
        await OpenVINOBackend(str(tmp_path)).agenerate(request)
    answer = await make_backend(BackendConfig(name="openvino", model=str(tmp_path))).agenerate(request)
    assert answer.fell_back and answer.backend == "extractive" and "repocomp model prepare" in answer.error
    assert answer.text.strip() == "sum(items)"


# ---- the real local model ----------------------------------------------------------------------------------------

_SOURCE = (Path(__file__).resolve().parent.parent / "repocomp" / "pipeline.py").read_text(encoding="utf-8")


def _request(prompt: str, **extra: object) -> GenerationRequest:
    return GenerationRequest(prompt=prompt, prefix=prompt, suffix="", candidates=(), max_new_tokens=24,
                             **extra)  # type: ignore[arg-type]


@pytest.mark.local_model
async def test_prefix_reuse_answers_as_a_fresh_prompt_and_a_cancelled_request_stops_between_tokens(
        local_model: LocalModel) -> None:
    backend = OpenVINOBackend(str(local_model.path))
    typed, other = _SOURCE[:3000] + "\n\ndef helper(x):\n    return x", _SOURCE[:3000] + "\n\nclass Holder:\n"
    fresh = (await backend.agenerate(_request(typed))).text  # the cache holds nothing of this prompt's end yet
    await backend.agenerate(_request(other))  # shares all but the last line with `typed`
    again = await backend.agenerate(_request(typed))
    assert fresh and again.text == fresh
    # both later prompts share the first 3,000 characters (about 690 tokens) with the one before
    assert backend.stats()["prefix_cache"]["reused_tokens"] > 2 * 600

    cancelled = threading.Event()
    seen: list[str] = []

    def cancel_after_first(text: str) -> bool:
        seen.append(text)
        cancelled.set()  # as an await cancelled while the first token is decoded
        return False

    whole = backend._generate(_request(other), threading.Event())[0]  # noqa: SLF001 - the worker's own entry
    cut = backend._generate(_request(other, finished=cancel_after_first), cancelled)[0]  # noqa: SLF001
    assert len(seen) == 1 and len(cut) < len(whole)
    await backend.aclose()


def _resident_mb(path: Path) -> float:
    """The resident MB of this process's maps of `path` (/proc/self/smaps)."""
    target, kb, inside = " " + os.path.realpath(path), 0, False
    with open("/proc/self/smaps", encoding="utf-8", errors="replace") as smaps:
        for line in smaps:
            if re.match(r"[0-9a-f]+-[0-9a-f]+ ", line):
                inside = line.rstrip("\n").endswith(target)
            elif inside and line.startswith("Rss:"):
                kb += int(line.split()[1])
    return kb / 1024


def test_giving_back_a_mapped_files_pages_empties_its_resident_part_and_keeps_its_bytes(tmp_path: Path) -> None:
    path = tmp_path / "weights.bin"
    data = np.random.default_rng(0).integers(0, 255, 32 << 20, dtype=np.uint8).tobytes()
    path.write_bytes(data)
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        assert mapped[::4096] == data[::4096]  # every page read: resident
        assert _resident_mb(path) >= 31
        assert give_back_pages(path) == len(data)
        assert _resident_mb(path) < 2
        assert mapped[:] == data  # read again from the file
    assert give_back_pages(tmp_path / "not-mapped.bin") == 0


@pytest.mark.local_model
async def test_the_weights_files_pages_are_given_back_after_a_generation_and_not_read_again(
        local_model: LocalModel) -> None:
    backend = OpenVINOBackend(str(local_model.path))
    prompt = _SOURCE[:2000] + "\n\ndef helper(x):\n    return x"
    assert (await backend.agenerate(_request(prompt))).text
    assert backend._loaded is not None  # noqa: SLF001 - the pipeline's weights file
    weights = backend._loaded.weights  # noqa: SLF001
    size_mb = weights.stat().st_size / 2**20
    # the runtime keeps the weights in its own memory: it reads none of the file's pages again
    assert _resident_mb(weights) < 0.1 * size_mb, (_resident_mb(weights), size_mb)
    assert give_back_pages(weights) >= weights.stat().st_size  # its maps are found (all of the file)
    assert (await backend.agenerate(_request(prompt + "\n\n\ndef other(y):\n"))).text
    assert _resident_mb(weights) < 0.1 * size_mb
    await backend.aclose()


@pytest.mark.local_model
async def test_backends_of_one_precision_share_a_pipeline_and_each_precision_loads_its_own(
        local_model: LocalModel) -> None:
    """`[backend.openvino] precision`: one pipeline per model file and precision (a pipeline holds the weights in
    its own layout: a second one of the same settings would hold them twice)."""
    f32, again, bf16 = (OpenVINOBackend(str(local_model.path), precision=p) for p in ("f32", "f32", "bf16"))
    for backend in (f32, again, bf16):
        await backend.aload()
    assert f32._loaded is again._loaded and bf16._loaded is not f32._loaded  # noqa: SLF001 - the pipelines
    for backend in (f32, bf16):
        answer = await backend.agenerate(_request("def add(a, b):\n    return"))
        assert answer.text.strip().startswith("a + b")
        await backend.aclose()
    await again.aclose()


@pytest.mark.local_model
async def test_a_cancelled_await_frees_the_model_for_the_next_request(local_model: LocalModel) -> None:
    backend = OpenVINOBackend(str(local_model.path))
    await backend.aload()
    long_answer = GenerationRequest(prompt=_SOURCE[:3000], prefix=_SOURCE[:3000], suffix="", candidates=(),
                                    max_new_tokens=400)
    task = asyncio.create_task(backend.agenerate(long_answer))
    await asyncio.sleep(2.0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    quick = await asyncio.wait_for(backend.agenerate(_request("def add(a, b):\n    return")), 60)
    assert quick.text.strip().startswith("a + b")
    await backend.aclose()


def test_prefill_pieces_end_after_a_newline_before_a_line_of_text_about_every_size_characters() -> None:
    prompt = "".join(f"line {i}\n" + ("\n   \n" if i % 3 == 0 else "") for i in range(200)) + "tail"
    ends = prefill_pieces(prompt, size=100)
    assert ends[-1] == len(prompt) and ends == sorted(set(ends))
    for end in ends[:-1]:
        assert prompt[end - 1] == "\n" and prompt[end:].split("\n", 1)[0].strip()  # the next line has text
    assert all(100 <= b - a <= 100 + 20 for a, b in zip([0, *ends[:-2]], ends[:-1]))  # a line or two past `size`
    assert prefill_pieces("short prompt", size=100) == [len("short prompt")]


@pytest.mark.local_model
async def test_a_prefill_computes_the_prompt_ahead_and_yields_to_a_generation_that_waits(
        local_model: LocalModel) -> None:
    backend = OpenVINOBackend(str(local_model.path))
    prompt = _SOURCE[:3000] + "\n\ndef helper(x):\n    return x"
    fresh = (await backend.agenerate(_request(prompt))).text
    await backend.agenerate(_request(_SOURCE[5000:8000]))  # another prompt in between
    # each piece's prefix is tokenized as the whole prompt starts, so the cache holds what the request reads
    tokenizer = backend._loaded.pipeline.get_tokenizer()  # noqa: SLF001
    whole = tokenizer.encode(prompt).input_ids.data.ravel().tolist()
    for end in prefill_pieces(prompt)[:-1]:
        piece = tokenizer.encode(prompt[:end]).input_ids.data.ravel().tolist()
        assert whole[:len(piece)] == piece
    assert await backend.aprefill(_request(prompt))
    reused = backend.stats()["prefix_cache"]["reused_tokens"]
    again = await backend.agenerate(_request(prompt))
    assert again.text == fresh  # the cache answers as a fresh prompt
    assert backend.stats()["prefix_cache"]["reused_tokens"] - reused == len(whole)
    assert backend.stats()["model_time"]["prefills"] == 1

    # a long prefill (about 14 pieces) stops between two pieces once a generation waits for the model
    prefill = asyncio.create_task(backend.aprefill(_request(_SOURCE[8000:22000])))
    await asyncio.sleep(0.5)
    quick = await asyncio.wait_for(backend.agenerate(_request("def add(a, b):\n    return")), 60)
    assert quick.text.strip().startswith("a + b")
    assert await prefill is False
    await backend.aclose()
