"""In-process generation through llama.cpp, from the prepared model's GGUF file (4-bit Q4_K_M as shipped).

Why a second in-process runtime: a decoded token reads every weight once, and llama.cpp reads them in 4 bits where
transformers reads bf16 (the 0.5B model: 24-27 ms a token against 58 on a 2-core AVX-512 CPU), while transformers'
bf16 matrix products win the prefill of a long cold prompt (docs/performance.md, The local model, has both).

The library comes from the `llama-cpp-cffi` wheel (llama_runtime.py). A model is loaded once per process and
shared by every backend naming the same file; generation runs in a worker thread that checks a flag after every
token, so a cancelled request stops the thread's work too.

Prefix reuse: the context keeps the keys and values of the last prompt of one cache key (`GenerationRequest.
cache_key`; none: nothing kept), and a request of the same key prefills only what follows their common prefix,
cut to an aligned chunk boundary (alignment.py) and prefilled in aligned chunks (one `llama_decode` call each,
starting at a multiple of CHUNK): the answer is the one a fresh prefill gives, bit for bit. llama.cpp's attention
rounds differently for a batch cut elsewhere (logits moved by up to 0.3 at one cut), which the alignment avoids.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from repocomp.backends.alignment import aligned_end, reusable
from repocomp.backends.base import (
    Capabilities,
    Generation,
    GenerationRequest,
    ReuseCounts,
    apply_stops,
    generate_in_thread,
    should_stop,
)
from repocomp.backends.llama_runtime import Runtime, load
from repocomp.backends.profile import QWEN_STOP_TOKENS, ModelProfile, local_cpu_profile, tokenizer_folder
from repocomp.config.schema import BackendConfig
from repocomp.errors import BackendError
from repocomp.text import encodable

__all__ = ["CHUNK", "LlamaCppBackend", "gguf_path"]

log = logging.getLogger(__name__)

# tokens per aligned chunk: the most a keystroke re-prefills beyond what changed. llama.cpp's prefill on the CPU
# costs about the same per token in chunks of 32 as of 512 (112 and 103 tokens a second, 0.5B model, 2 cores)
CHUNK = 32
CONTEXT = 8192  # tokens the context holds (the prompt and its answer): 96 MiB of keys and values for the 0.5B model


def gguf_path(model: str) -> Path:
    """The GGUF file a `[backend] model` names: the file itself, or the one in a prepared model folder."""
    path = Path(model).expanduser()
    if path.is_file():
        return path
    found = sorted(path.glob("*.gguf")) if path.is_dir() else []
    if not found:
        raise BackendError(f"llamacpp: {model!r} is neither a .gguf file nor a prepared model folder with one; run "
                           "`repocomp model prepare` again (it keeps the model's GGUF beside the checkpoint)")
    return found[0]


@dataclass(eq=False)
class _LoadedModel:
    runtime: Runtime
    model: Any  # llama_model *
    context: Any  # llama_context *
    vocab: Any  # const llama_vocab *
    n_vocab: int
    stop_ids: frozenset[int]  # end-of-generation tokens and the prompt format's stop tokens
    lock: threading.Lock = field(default_factory=threading.Lock)  # one sequence, one thread at a time
    held: list[int] = field(default_factory=list)  # the prompt tokens whose keys and values the context holds
    held_key: str | None = None
    counts: ReuseCounts = field(default_factory=ReuseCounts)

    def tokenize(self, text: str) -> list[int]:
        """The model's tokens for `text`, special tokens in it (the prompt format's) parsed as tokens."""
        lib, ffi = self.runtime.lib, self.runtime.ffi
        data = encodable(text).encode("utf-8")
        room = len(data) + 16
        buf = ffi.new("llama_token[]", room)
        n = lib.llama_tokenize(self.vocab, data, len(data), buf, room, True, True)
        if n < 0:
            raise BackendError(f"llamacpp: cannot tokenize the prompt ({-n} tokens)")
        return list(buf[0:n])

    def piece(self, token: int) -> bytes:
        """The bytes of one token; empty for a special token (as transformers' skip_special_tokens)."""
        lib, ffi = self.runtime.lib, self.runtime.ffi
        buf = ffi.new("char[]", 256)
        n = lib.llama_token_to_piece(self.vocab, token, buf, 256, 0, False)
        return ffi.buffer(buf, n)[:] if n > 0 else b""

    def decode(self, tokens: list[int], cancelled: threading.Event | None = None) -> None:
        """Compute `tokens` after what the context holds, a chunk per call (a cancelled request stops within one
        chunk's time, about 0.3 s on 2 cores; the calls cost what one long one does)."""
        lib, ffi = self.runtime.lib, self.runtime.ffi
        for start in range(0, len(tokens), CHUNK):
            if cancelled is not None and cancelled.is_set():
                return
            part = tokens[start:start + CHUNK]
            arr = ffi.new("llama_token[]", part)
            if lib.llama_decode(self.context, lib.llama_batch_get_one(arr, len(part))) != 0:
                raise BackendError("llamacpp: llama_decode failed (the context is full?)")
            self.held.extend(part)

    def logits(self) -> np.ndarray:
        lib, ffi = self.runtime.lib, self.runtime.ffi
        return np.frombuffer(ffi.buffer(lib.llama_get_logits_ith(self.context, -1), self.n_vocab * 4),
                             dtype=np.float32)

    def forget_from(self, position: int) -> None:
        """Drop the keys and values from `position` on."""
        self.runtime.lib.llama_kv_self_seq_rm(self.context, 0, position, -1)
        del self.held[position:]


_LOAD_LOCK = threading.Lock()
_LOADED: weakref.WeakValueDictionary[str, _LoadedModel] = weakref.WeakValueDictionary()


def _load_model(path: Path, threads: int) -> _LoadedModel:
    runtime = load()
    lib = runtime.lib
    params = lib.llama_model_default_params()
    model = lib.llama_model_load_from_file(str(path).encode(), params)
    if model == runtime.ffi.NULL:
        raise BackendError(f"llamacpp: cannot load {path} as a GGUF model")
    cp = lib.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch = CONTEXT, CHUNK, CHUNK
    cp.n_threads = cp.n_threads_batch = threads
    context = lib.llama_init_from_model(model, cp)
    if context == runtime.ffi.NULL:
        lib.llama_model_free(model)
        raise BackendError(f"llamacpp: cannot create a context for {path}")
    vocab = lib.llama_model_get_vocab(model)
    n_vocab = lib.llama_vocab_n_tokens(vocab)
    loaded = _LoadedModel(runtime, model, context, vocab, n_vocab, frozenset())
    stops = {t for t in range(n_vocab) if lib.llama_vocab_is_eog(vocab, t)}
    for text in QWEN_STOP_TOKENS:  # Qwen2.5-Coder ends an answer with <|endoftext|> or <|file_sep|>
        ids = loaded.tokenize(text)
        if len(ids) == 1:
            stops.add(ids[0])
    loaded.stop_ids = frozenset(stops)
    weakref.finalize(loaded, _free, lib, context, model)  # when the last backend holding it lets it go
    return loaded


def _free(lib: Any, context: Any, model: Any) -> None:
    lib.llama_free(context)
    lib.llama_model_free(model)


def _threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


class LlamaCppBackend:
    name = "llamacpp"
    capabilities = Capabilities(writes=True, in_process=True)

    @classmethod
    def profile(cls, config: BackendConfig) -> ModelProfile:
        return local_cpu_profile(tokenizer_folder(config.model))

    def __init__(self, model: str, threads: int = 0) -> None:
        self.model_name = model
        self.threads = threads or _threads()
        self._loaded: _LoadedModel | None = None

    @classmethod
    def from_config(cls, config: BackendConfig) -> LlamaCppBackend:
        return cls(model=config.model)

    def _load_once(self) -> None:
        path = gguf_path(self.model_name)
        with _LOAD_LOCK:
            loaded = _LOADED.get(str(path))
            if loaded is None:
                loaded = _load_model(path, self.threads)
                _LOADED[str(path)] = loaded
                log.info("loaded %s through llama.cpp (%d threads)", path, self.threads)
            self._loaded = loaded

    async def aload(self) -> None:
        if self._loaded is None:
            await asyncio.to_thread(self._load_once)

    def _prefill(self, loaded: _LoadedModel, tokens: list[int], key: str | None,
                 cancelled: threading.Event) -> None:
        """Make the context hold `tokens` up to their last chunk boundary: the reusable prefix kept, the rest
        computed in aligned chunks; the last chunk is computed by the pass that gives the first token's logits."""
        same_key = key is not None and key == loaded.held_key
        shared = len(os.path.commonprefix([loaded.held, tokens])) if same_key else 0
        # the held prompt's aligned chunks reached aligned_end(len(held)); its answer's tokens came after it
        keep = reusable(shared, len(loaded.held), CHUNK)
        loaded.forget_from(keep)
        loaded.held_key = key
        loaded.counts.add(keep, len(tokens))
        loaded.decode(tokens[keep:aligned_end(len(tokens), CHUNK)], cancelled)

    def _generate(self, request: GenerationRequest, cancelled: threading.Event) -> tuple[str, int, bool]:
        """(text, tokens generated, whether the time limit stopped it); stops early once `cancelled` is set."""
        loaded = self._loaded
        assert loaded is not None, "agenerate loads the model first"
        tokens = loaded.tokenize(request.prompt)
        if not tokens:
            return "", 0, False
        if len(tokens) + request.max_new_tokens > CONTEXT:
            raise BackendError(f"llamacpp: a {len(tokens)}-token prompt and {request.max_new_tokens} new tokens "
                               f"exceed the context of {CONTEXT} tokens; lower [prompt] max_tokens")
        stops = tuple(s for s in request.stop if s)
        rng = np.random.default_rng() if request.temperature > 0 else None
        answer, text, generated, at_limit = bytearray(), "", 0, False
        with loaded.lock:
            try:
                self._prefill(loaded, tokens, request.cache_key, cancelled)
                pending = tokens[len(loaded.held):]  # the prompt's last chunk: its pass gives the first logits
                first_at: float | None = None
                while not cancelled.is_set():
                    loaded.decode(pending)
                    if generated >= request.max_new_tokens:
                        break
                    token = _next_token(loaded.logits(), request.temperature, rng)
                    if token in loaded.stop_ids:
                        break
                    generated += 1
                    answer += loaded.piece(token)
                    text = answer.decode("utf-8", errors="ignore")
                    now = time.monotonic()
                    first_at = first_at or now
                    limit = request.max_time_s or 0.0
                    at_limit = limit > 0 and now - first_at >= limit
                    if at_limit or generated >= request.max_new_tokens or should_stop(text, stops, request.finished):
                        break
                    pending = [token]
            finally:
                # the context keeps the prompt (or what of it was computed): the next request's prefix is compared
                # with it
                loaded.forget_from(min(len(loaded.held), len(tokens)))
        return text, generated, at_limit

    async def agenerate(self, request: GenerationRequest) -> Generation:
        await self.aload()
        text, n, at_limit = await generate_in_thread(self._generate, request)
        text, _ = apply_stops(text, request.stop)
        log.debug("llamacpp generated %d tokens", n)
        return Generation(text=text, backend=self.name, at_time_limit=at_limit)

    async def astream(self, request: GenerationRequest) -> AsyncIterator[str]:
        """One piece, the whole completion (as the transformers backend)."""
        yield (await self.agenerate(request)).text

    def stats(self) -> dict[str, Any]:
        """The model file, the runtime and prefix reuse (requests, hits, hit_rate, reused and prefilled tokens, the
        prompt kept: entries and tokens)."""
        loaded = self._loaded
        counts = (loaded.counts if loaded is not None else ReuseCounts()).as_stats()
        held = len(loaded.held) if loaded is not None else 0
        counts["entries"], counts["tokens"] = int(held > 0), held  # one prompt kept, as transformers' entries
        return {"model": self.model_name, "runtime": "llama.cpp", "prefix_cache": counts}

    async def aclose(self) -> None:
        self._loaded = None  # the model goes when no other backend holds it


def _next_token(logits: np.ndarray, temperature: float, rng: np.random.Generator | None) -> int:
    if rng is None:
        return int(logits.argmax())
    scaled = (logits - logits.max()) / temperature
    probs = np.exp(scaled)
    return int(rng.choice(len(probs), p=probs / probs.sum()))

