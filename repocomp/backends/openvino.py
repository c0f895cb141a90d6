"""In-process generation through OpenVINO GenAI, from the prepared model's OpenVINO files (openvino_weights.py).

Why this runtime: its prebuilt wheels choose their CPU kernels at run time and read the weights in 8 bits, where
transformers reads them in bf16 or float32; it needs no torch at run time; and its continuous-batching pipeline
keeps the keys and values of earlier prompts in blocks and reuses the longest cached prefix of a new one (prefix
caching), which is what a keystroke's request needs: the same prompt up to the cursor. docs/performance.md, The
local model, has its figures beside the other runtimes'.

A pipeline is loaded once per process and shared by every backend naming the same file and precision. Generation
runs in a worker thread, one at a time (the pipeline serves one request here); the streamer callback sees the text
after every token and stops the generation when the request is cancelled, its text is finished (the stop sequences, the
request's `finished`) or its time is up. After its first generation the runtime holds the weights in its own
layout, and the pages of the weights file it read are given back (about 0.5 GB of the process's RSS with the 0.5B
model; docs/performance.md). `aprefill` computes a prompt ahead of its request (the language server's
prefetch, when the developer pauses), in pieces, and stops between two when a generation waits for the model.
"""

from __future__ import annotations

import asyncio
import ctypes
import importlib.util
import logging
import mmap
import os
import threading
import time
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from repocomp.backends.base import (
    Capabilities,
    Generation,
    GenerationRequest,
    ModelTurns,
    ReuseCounts,
    apply_stops,
    generate_in_thread,
    should_stop,
)
from repocomp.backends.openvino_weights import IR_MODEL, OPENVINO_DIR, prepared_openvino_model
from repocomp.backends.profile import QWEN_STOP_TOKENS, ModelProfile, local_cpu_profile, tokenizer_folder
from repocomp.config.schema import BackendConfig
from repocomp.errors import BackendError
from repocomp.text import encodable

__all__ = ["OpenVINOBackend", "openvino_model"]

log = logging.getLogger(__name__)

# the prefix cache's room for keys and values, in the runtime's blocks of 32 tokens on a CPU: 16,384 tokens, about
# sixteen prompts of the local model's 1,024 (the prompts of the lines a developer works at; a request reuses the
# one before it). The cache grows as it fills: room for 1 GB took the process from 1.0 to 1.4 GB over 60 prompts
KV_BLOCKS = 512
# a prefill computes its prompt in pieces of about this many characters (about 300 tokens: 0.3-0.5 s on 2 cores),
# so that a request that wants the model waits for one piece at most
PREFILL_PIECE_CHARS = 1024
_MADV_PAGEOUT = getattr(mmap, "MADV_PAGEOUT", 21)  # Linux 5.4's value; Python 3.11's mmap does not name it


def openvino_model(model: str) -> Path:
    """What the runtime reads for a `[backend] model`: a GGUF file of the tensor types it reads, a folder of
    OpenVINO's model files, or a prepared model folder with them in `openvino/`."""
    path = Path(model).expanduser()
    if path.is_file() or (path / IR_MODEL).is_file():
        return path
    prepared = prepared_openvino_model(path)
    if prepared is not None:
        return prepared
    raise BackendError(f"openvino: {model!r} has no {OPENVINO_DIR}/{IR_MODEL}; run `repocomp model prepare` again "
                       "(it writes them once the openvino runtime is installed: pip install 'repocomp[local]')")


@dataclass(eq=False)
class _Pipeline:
    pipeline: Any  # openvino_genai.LLMPipeline
    stop_ids: frozenset[int]
    weights: Path  # the file the runtime maps, read once into its own layout at the first generation
    weights_given_back: bool = False
    turns: ModelTurns = field(default_factory=ModelTurns)  # one generation or prefill piece at a time
    last_prompt: list[int] = field(default_factory=list)
    counts: ReuseCounts = field(default_factory=ReuseCounts)
    # where the model's time went, summed over requests (the runtime's own measures)
    spent: dict[str, float] = field(default_factory=lambda: {"requests": 0, "first_token_ms": 0.0, "decode_ms": 0.0,
                                                             "decoded_tokens": 0, "prefills": 0,
                                                             "prefill_ms": 0.0})


def prefill_pieces(prompt: str, size: int = PREFILL_PIECE_CHARS) -> list[int]:
    """The ends of the prompt's prefixes a prefill computes one after another: every `size` characters or so, just
    after a newline whose next line has text (a prefix cut there is tokenized as the whole prompt starts: a newline
    before a blank line would merge with it), and the prompt's end."""
    ends: list[int] = []
    at = prompt.find("\n", size)
    while at != -1 and at + 1 < len(prompt):
        line_end = prompt.find("\n", at + 1)
        if prompt[at + 1:line_end if line_end != -1 else len(prompt)].strip():
            ends.append(at + 1)
            at = prompt.find("\n", at + 1 + size)
        else:
            at = line_end
    return [*ends, len(prompt)]


_LOAD_LOCK = threading.Lock()
_LOADED: weakref.WeakValueDictionary[str, _Pipeline] = weakref.WeakValueDictionary()


def _load(path: Path, precision: str) -> _Pipeline:
    try:
        import openvino_genai as og
    except ImportError:
        raise BackendError("openvino: the runtime is not installed: pip install 'repocomp[local]'") from None
    scheduler = og.SchedulerConfig()
    scheduler.enable_prefix_caching = True
    scheduler.cache_size, scheduler.num_kv_blocks = 0, KV_BLOCKS  # a size of 0: the blocks' number counts
    try:
        # `[backend.openvino] precision`: "bf16" is the runtime's own choice (bf16 where the CPU has it, else f32)
        hint = {"INFERENCE_PRECISION_HINT": "f32"} if precision == "f32" else {}
        pipeline = og.LLMPipeline(str(path), "CPU", scheduler_config=scheduler, **hint)
    except RuntimeError as exc:
        raise BackendError(f"openvino: cannot load {path}: {str(exc).splitlines()[0] if str(exc) else exc}; "
                           "run `repocomp model prepare --force` to write it again") from None
    tokenizer = pipeline.get_tokenizer()
    stops = {tokenizer.get_eos_token_id()}
    for text in QWEN_STOP_TOKENS:  # Qwen2.5-Coder ends an answer with <|endoftext|> or <|file_sep|>
        ids = tokenizer.encode(text).input_ids.data.ravel().tolist()
        if len(ids) == 1:
            stops.add(int(ids[0]))
    return _Pipeline(pipeline, frozenset(stops), _weights_file(path))


def _weights_file(path: Path) -> Path:
    """The file of weights the runtime maps for a model path (a GGUF file, or the folder of its IR)."""
    return path if path.is_file() else (path / IR_MODEL).with_suffix(".bin")


def give_back_pages(path: Path) -> int:
    """Ask the kernel to take back the resident pages of this process's maps of `path` (the runtime's own maps:
    Python holds none of them); the bytes advised. Pages used again are read again from the file; a hint, so on
    another OS or an old kernel nothing happens."""
    target = " " + os.path.realpath(path)
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            ranges = [[int(a, 16) for a in line.split(maxsplit=1)[0].split("-")]
                      for line in maps if line.rstrip("\n").endswith(target)]
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return 0
    madvise.argtypes, madvise.restype = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int], ctypes.c_int
    return sum(end - start for start, end in ranges if madvise(start, end - start, _MADV_PAGEOUT) == 0)


def _after_first_generation(loaded: _Pipeline) -> None:
    """The runtime has laid the weights out in its own memory at its first generation (measured: the file's pages
    are not read again), so the file's pages it read are given back once."""
    if not loaded.weights_given_back:
        loaded.weights_given_back = True
        log.debug("openvino: gave back %d MB of %s", give_back_pages(loaded.weights) >> 20, loaded.weights)


class OpenVINOBackend:
    name = "openvino"
    capabilities = Capabilities(writes=True, in_process=True)

    @classmethod
    def profile(cls, config: BackendConfig) -> ModelProfile:
        return local_cpu_profile(tokenizer_folder(config.model))

    @classmethod
    def runs_here(cls, config: BackendConfig, folder: Path) -> bool:
        """Whether it can run the prepared model in `folder`: on a CPU, with the runtime installed and the folder's
        OpenVINO files written (`repocomp model prepare`)."""
        return config.device == "cpu" and prepared_openvino_model(folder) is not None \
            and importlib.util.find_spec("openvino_genai") is not None

    def __init__(self, model: str, precision: str = "f32") -> None:
        self.model_name = model
        self.precision = precision
        self._loaded: _Pipeline | None = None

    @classmethod
    def from_config(cls, config: BackendConfig) -> OpenVINOBackend:
        return cls(model=config.model, precision=config.openvino.precision)

    def _load_once(self) -> None:
        path = openvino_model(self.model_name)
        with _LOAD_LOCK:
            key = f"{path}:{self.precision}"
            loaded = _LOADED.get(key)
            if loaded is None:
                start = time.monotonic()
                loaded = _load(path, self.precision)
                _LOADED[key] = loaded
                log.info("loaded %s through OpenVINO GenAI in %.1f s", path, time.monotonic() - start)
            self._loaded = loaded

    async def aload(self) -> None:
        if self._loaded is None:
            await asyncio.to_thread(self._load_once)

    def _generate(self, request: GenerationRequest, cancelled: threading.Event) -> tuple[str, bool]:
        """(text, whether the time limit stopped it); stops after the token at which `cancelled` is set."""
        import openvino_genai as og

        loaded = self._loaded
        assert loaded is not None, "agenerate loads the model first"
        prompt = encodable(request.prompt)
        config = og.GenerationConfig()
        config.max_new_tokens = max(1, request.max_new_tokens)
        config.apply_chat_template = False  # the prompt is the model's whole input, FIM tokens and all
        config.stop_token_ids = set(loaded.stop_ids)
        if request.temperature > 0:
            config.do_sample, config.temperature = True, request.temperature
        else:
            config.do_sample = False
        stops = tuple(s for s in request.stop if s)
        text, first_at, at_limit = "", 0.0, False

        def on_text(piece: str) -> Any:
            nonlocal text, first_at, at_limit
            text += piece
            now = time.monotonic()
            first_at = first_at or now
            at_limit = bool(request.max_time_s) and now - first_at >= (request.max_time_s or 0.0)
            done = cancelled.is_set() or at_limit or should_stop(text, stops, request.finished)
            return og.StreamingStatus.STOP if done else og.StreamingStatus.RUNNING

        with loaded.turns.turn():
            if cancelled.is_set():
                return "", False
            self._count_reuse(loaded, prompt)
            try:
                result = loaded.pipeline.generate([prompt], config, on_text)
            except RuntimeError as exc:
                raise BackendError(f"openvino: generation failed: {exc}") from None
            _add_time(loaded.spent, result.perf_metrics)
            _after_first_generation(loaded)
        return result.texts[0], at_limit

    def _prefill(self, request: GenerationRequest, cancelled: threading.Event) -> bool:
        """The prompt into the prefix cache, a piece at a time (each reuses the ones before); False when a
        generation waited for the model (or the prefill was cancelled) before the last piece."""
        import openvino_genai as og

        loaded = self._loaded
        assert loaded is not None, "aprefill loads the model first"
        prompt = encodable(request.prompt)
        config = og.GenerationConfig()
        config.max_new_tokens, config.apply_chat_template, config.do_sample = 1, False, False
        for end in prefill_pieces(prompt):
            if loaded.turns.prefill_stops(cancelled):
                return False
            with loaded.turns.lock:
                start = time.monotonic()
                try:
                    loaded.pipeline.generate([prompt[:end]], config)
                except RuntimeError as exc:
                    raise BackendError(f"openvino: prefill failed: {exc}") from None
                loaded.spent["prefill_ms"] += (time.monotonic() - start) * 1000
                _after_first_generation(loaded)
        with loaded.turns.lock:
            loaded.last_prompt = loaded.pipeline.get_tokenizer().encode(prompt).input_ids.data.ravel().tolist()
            loaded.spent["prefills"] += 1
        return True

    async def aprefill(self, request: GenerationRequest) -> bool:
        await self.aload()
        return await generate_in_thread(self._prefill, request)

    @staticmethod
    def _count_reuse(loaded: _Pipeline, prompt: str) -> None:
        """Prefix reuse as the runtime sees it, estimated: the prompt's tokens shared with the previous prompt
        (the runtime's cache keeps more, in blocks; it does not report hits)."""
        tokens = loaded.pipeline.get_tokenizer().encode(prompt).input_ids.data.ravel().tolist()
        shared = len(os.path.commonprefix([loaded.last_prompt, tokens]))
        loaded.last_prompt = tokens
        loaded.counts.add(shared, len(tokens))

    async def agenerate(self, request: GenerationRequest) -> Generation:
        await self.aload()
        text, at_limit = await generate_in_thread(self._generate, request)
        text, _ = apply_stops(text, request.stop)
        return Generation(text=text, backend=self.name, at_time_limit=at_limit)

    async def astream(self, request: GenerationRequest) -> AsyncIterator[str]:
        """One piece, the whole completion (as the other in-process backends)."""
        yield (await self.agenerate(request)).text

    def stats(self) -> dict[str, Any]:
        """The model file, the runtime, prefix reuse (requests, hits, hit_rate, reused and prefilled tokens) and
        where the model's time went (`model_time`: requests, first_token_ms and decode_ms summed, decoded_tokens)."""
        loaded = self._loaded
        counts = (loaded.counts if loaded is not None else ReuseCounts()).as_stats()
        spent = dict(loaded.spent) if loaded is not None else {}
        return {"model": self.model_name, "runtime": "OpenVINO GenAI", "prefix_cache": counts, "model_time": spent}

    async def aclose(self) -> None:
        self._loaded = None  # the pipeline goes when no other backend holds it


def _add_time(spent: dict[str, float], metrics: Any) -> None:
    """Add one generation's time to the first token (the prompt's prefill) and its decoding to `spent`."""
    tokens = int(metrics.get_num_generated_tokens())
    first = float(metrics.get_ttft().mean)
    spent["requests"] += 1
    spent["first_token_ms"] += first
    spent["decode_ms"] += max(0.0, float(metrics.get_generate_duration().mean) - first) if tokens > 1 else 0.0
    spent["decoded_tokens"] += max(0, tokens - 1)
