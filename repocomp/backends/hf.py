"""In-process generation with a local causal LM through `transformers` (CPU or GPU).

torch and transformers are imported on first use, so `repocomp` works without them (`pip install 'repocomp[hf]'`).
The model is loaded once per process, off the event loop, and shared by every backend that names it (a language
server builds one per folder configuration); generation runs in a worker thread and checks a flag after every token,
so cancelling `agenerate` stops the thread's work too, not just the await.

Prefix reuse: a loaded model keeps the KV caches of recent prompts per `GenerationRequest.cache_key`, and a request
prefills only the tokens after its longest common prefix with one of its key's (prefix_cache.py); greedy requests
decode with prompt lookup from there (`greedy.generate_greedy`), with or without a key. `aprefill` (the language
server's prefetch) fills such a cache ahead of its request, a few aligned chunks at a time, and stops between two
once a generation waits for the model.

A request's steps (`_generate`): encode the prompt, take a cache of its longest reusable prefix, decode (greedy:
`_decode_greedy`, sampled: `_sample`; both stop by `greedy.StopRules`), keep the cache for the next request, decode
the new tokens into text.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from repocomp.backends.base import (
    Capabilities,
    Generation,
    GenerationRequest,
    ModelTurns,
    apply_stops,
    generate_in_thread,
)
from repocomp.backends.local_model import cpu_has_native_bf16, runtime_missing
from repocomp.backends.profile import (
    QWEN_STOP_TOKENS,
    ModelProfile,
    local_cpu_profile,
    served_profile,
    tokenizer_folder,
)
from repocomp.config.schema import BackendConfig
from repocomp.errors import BackendError
from repocomp.text import encodable

if TYPE_CHECKING:
    import torch
    from transformers import BatchEncoding, PreTrainedTokenizerBase

    # what AutoModelForCausalLM loads, as transformers annotates it: a PreTrainedModel and a GenerationMixin
    from transformers.models.auto.modeling_auto import _BaseModelWithGenerate as CausalLM

    from repocomp.backends.greedy import StopRules
    from repocomp.backends.output_head import OutputHead
    from repocomp.backends.prefix_cache import PrefixCache, Reuse

__all__ = ["TransformersBackend", "auto_dtype", "cpu_has_native_bf16"]

log = logging.getLogger(__name__)


def has_sliding_window(config: Any) -> bool:
    """Whether a model's attention has sliding-window layers, whose masks hide most keys of a long prompt: there the
    blocked attention (hf_attention.py) skips what torch's SDPA computes and throws away. With causal masks alone
    (Qwen2.5-Coder) SDPA was as fast or faster (docs/performance.md, Decisions)."""
    config = getattr(config, "text_config", None) or config
    return "sliding_attention" in (getattr(config, "layer_types", None) or ()) or bool(
        getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True))


@dataclass(eq=False)
class _LoadedModel:
    model: CausalLM
    tokenizer: PreTrainedTokenizerBase
    # the KV caches of recent prompts, shared (and bounded) across the backends that share the model
    prefix_cache: PrefixCache
    turns: ModelTurns = field(default_factory=ModelTurns)  # a model is not safe to share across threads
    # built at the first load by a backend that asks for it; None where it does not apply
    output_head: OutputHead | None = None
    output_head_built: bool = False


# transformers' loading is not thread-safe (lazy imports, meta-device initialisation are process-wide state: two
# loads at once failed with "Cannot copy out of meta tensor"), so loads take turns; a model stays loaded while a
# backend holds it.
_LOAD_LOCK = threading.Lock()
_LOADED: weakref.WeakValueDictionary[tuple[str, str, str], _LoadedModel] = weakref.WeakValueDictionary()
_PROMPT_LOOKUP_TOKENS = 10  # draft length of prompt lookup decoding (the transformers docs' suggested value)
_PREFILL_CHUNKS = 2  # a prefill's piece, in the prefix cache's aligned chunks: what a waiting request may wait for


def auto_dtype(device: str, native_bf16: bool) -> torch.dtype | str:
    """The dtype "auto" loads in: the checkpoint's (the local model's is bf16), except on a CPU without native
    bf16, where bf16 products are emulated: a 1,000-token prefill of the local model took 27.5 s there against
    2.3 s in float32 (AVX2 only); with AVX-512 BF16 or AMX, bf16 runs about 1.5x faster than float32 (README,
    Local model)."""
    import torch

    return torch.float32 if device == "cpu" and not native_bf16 else "auto"


def _stop_on_special_tokens(model: CausalLM, tokenizer: PreTrainedTokenizerBase) -> None:
    """Make every stop token of the prompt formats this model's tokenizer has an end of generation (Qwen2.5-Coder
    ends a fill-in-the-middle answer with <|endoftext|> or <|file_sep|>, its checkpoint names only <|im_end|>):
    the answer is decoded without special tokens, so they must stop it as tokens, not as text."""
    vocab = tokenizer.get_vocab()
    extra = [vocab[t] for t in QWEN_STOP_TOKENS if t in vocab]
    if not extra:
        return
    eos = model.generation_config.eos_token_id
    known = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
    model.generation_config.eos_token_id = [*known, *(i for i in extra if i not in known)]


class TransformersBackend:
    name = "transformers"
    capabilities = Capabilities(writes=True, in_process=True)

    @classmethod
    def profile(cls, config: BackendConfig) -> ModelProfile:
        """On a CPU, the local model's defaults; on an accelerator, a served model's."""
        tokenizer = tokenizer_folder(config.model)
        return local_cpu_profile(tokenizer) if config.device == "cpu" else \
            served_profile(config.max_new_tokens, tokenizer)

    @classmethod
    def runs_here(cls, config: BackendConfig, folder: Path) -> bool:
        """Whether it can run the prepared model in `folder` (torch and transformers installed)."""
        return not runtime_missing()

    def __init__(self, model: str, device: str = "cpu", dtype: str = "auto", fast_output_head: bool = True) -> None:
        self.model_name = model
        self.device = device
        self.dtype = dtype
        self.fast_output_head = fast_output_head
        self._loaded: _LoadedModel | None = None

    @classmethod
    def from_config(cls, config: BackendConfig) -> TransformersBackend:
        return cls(model=config.model, device=config.device, dtype=config.transformers.dtype,
                   fast_output_head=config.transformers.fast_output_head)

    async def _ensure_loaded(self) -> None:
        # The worker thread stores what it loaded itself: a request cancelled while waiting (timeout, a newer
        # keystroke) does not throw away a half-minute load.
        if self._loaded is None:
            await asyncio.to_thread(self._load_once)

    def _load_once(self) -> None:
        key = (self.model_name, self.device, self.dtype)
        with _LOAD_LOCK:
            loaded = _LOADED.get(key)
            if loaded is None:
                from repocomp.backends.prefix_cache import PrefixCache

                loaded = _LoadedModel(*self._load(), prefix_cache=PrefixCache())
                _LOADED[key] = loaded
            if self.fast_output_head and not loaded.output_head_built:  # the fp16 copy: once, off the request path
                from repocomp.backends.output_head import OutputHead

                loaded.output_head = OutputHead.for_model(loaded.model, timed=True)
                loaded.output_head_built = True
            self._loaded = loaded

    def _load(self) -> tuple[CausalLM, PreTrainedTokenizerBase]:
        try:
            import torch
            from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
        except ImportError as exc:
            raise BackendError(
                f"the transformers backend needs torch and transformers ({exc.name} is missing): "
                "pip install 'repocomp[hf]', or use backend 'vllm' or 'extractive'"
            ) from None
        local = Path(self.model_name).expanduser()
        source = str(local) if local.exists() else self.model_name
        try:
            # local_files_only: never reach for the network from a completion request; a hub id must be cached.
            tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=True)
            dtype = {"auto": auto_dtype(self.device, cpu_has_native_bf16()), "float32": torch.float32,
                     "bfloat16": torch.bfloat16}[self.dtype]
            options: dict[str, Any] = {}
            if self.device == "cpu" and has_sliding_window(AutoConfig.from_pretrained(source, local_files_only=True)):
                from repocomp.backends.hf_attention import register

                options["attn_implementation"] = register()
            model = AutoModelForCausalLM.from_pretrained(source, local_files_only=True, dtype=dtype, **options)
            # transformers wraps PreTrainedModel.to with functools.wraps, typed (_Wrapped) without binding self:
            # mypy takes `self.device` for the model
            model.to(self.device)  # type: ignore[arg-type]
            model.eval()
            _stop_on_special_tokens(model, tokenizer)
        except (OSError, ValueError) as exc:
            raise BackendError(
                f"transformers: cannot load model {self.model_name!r} on {self.device}: {exc}. "
                "Point [backend] model at a local model directory (or a model already in the Hugging Face cache)."
            ) from None
        except RuntimeError as exc:  # e.g. an unavailable device
            raise BackendError(f"transformers: cannot use device {self.device!r}: {exc}") from None
        log.info("loaded %s on %s (%s)", self.model_name, self.device, model.dtype)
        return model, tokenizer

    def encode(self, prompt: str) -> BatchEncoding:
        """The model's input for `prompt`, with the tokenizer's special tokens (BOS for Gemma and Llama) as the
        model was trained and as vLLM's completions endpoint adds them: without BOS the local model's NLL on the
        ground truth of 40 line tasks was 5% higher (3.47 vs 3.31 nats per token, worse on 26 of them)."""
        assert self._loaded is not None, "load the model first"
        # the tokenizer refuses lone surrogates: escaped as the prompt's token count saw them (repocomp.text)
        return self._loaded.tokenizer(encodable(prompt), return_tensors="pt", add_special_tokens=True)

    def _generate(self, request: GenerationRequest, cancelled: threading.Event) -> tuple[str, int, bool]:
        """(text, tokens generated, whether the time limit stopped it); stops early once `cancelled` is set."""
        import torch

        from repocomp.backends.greedy import StopRules, decode

        loaded = self._loaded
        assert loaded is not None, "agenerate loads the model first"
        enc = self.encode(request.prompt)
        input_ids = enc["input_ids"].to(self.device)
        n_in = input_ids.shape[1]
        stop = StopRules(loaded.tokenizer, n_in, tuple(s for s in request.stop if s), request.finished, cancelled,
                         request.max_time_s)
        cached = loaded.prefix_cache
        with loaded.turns.turn(), torch.inference_mode():
            # a cache holding the prompt's longest common prefix with a recent prompt of this key (or nothing), cut
            # to an aligned chunk boundary, the rest prefilled in aligned chunks: the answer is the one a fresh
            # prefill gives, bit for bit (prefix_cache's docstring)
            reuse = cached.take(request.cache_key, input_ids[0])
            if request.temperature > 0:
                out = self._sample(loaded, request, enc["attention_mask"], input_ids, reuse, stop)
            else:
                out = self._decode_greedy(loaded, request, input_ids, reuse, stop)
            # kept only after a generation that ran to its end (a stop, cancelled included): its cache is whole
            cached.put(request.cache_key, out[0, :reuse.cache.get_seq_length()], n_in, reuse.cache, reuse)
        new = out[0, n_in:]
        return decode(loaded.tokenizer, new), int(new.shape[0]), stop.at_time_limit

    def _prefill(self, request: GenerationRequest, cancelled: threading.Event) -> bool:
        """The prompt's aligned chunks into the prefix cache under the request's key, `_PREFILL_CHUNKS` at a time
        (each piece reuses the ones before); False when a generation waited for the model (or the prefill was
        cancelled) before the last piece, or the cache keeps nothing for this request."""
        import torch

        from repocomp.backends.alignment import aligned_end
        from repocomp.backends.prefix_cache import prefill_aligned, supports_reuse

        loaded = self._loaded
        assert loaded is not None, "aprefill loads the model first"
        cached, chunk = loaded.prefix_cache, loaded.prefix_cache.chunk
        if request.cache_key is None or not chunk or not supports_reuse():
            return False
        input_ids = self.encode(request.prompt)["input_ids"].to(self.device)
        n, end = input_ids.shape[1], aligned_end(input_ids.shape[1], chunk)
        for piece_end in [*range(_PREFILL_CHUNKS * chunk, end, _PREFILL_CHUNKS * chunk), end]:
            if loaded.turns.prefill_stops(cancelled):
                return False
            with loaded.turns.lock, torch.inference_mode():
                reuse = cached.take(request.cache_key, input_ids[0], count=False)
                if reuse.reused >= piece_end:
                    continue
                fed = prefill_aligned(loaded.model, input_ids[:, :piece_end + 1], reuse.cache, reuse.reused, chunk)
                # kept as the whole prompt's: a later request reuses it up to what was fed (prefix_cache.reusable)
                cached.put(request.cache_key, input_ids[0, :fed], n, reuse.cache, reuse)
        return True

    async def aprefill(self, request: GenerationRequest) -> bool:
        await self._ensure_loaded()
        try:
            return await generate_in_thread(self._prefill, request)
        except (RuntimeError, ValueError) as exc:
            raise BackendError(f"transformers: prefill failed: {exc}") from None

    def _decode_greedy(self, loaded: _LoadedModel, request: GenerationRequest, input_ids: torch.Tensor,
                       reuse: Reuse, stop: StopRules) -> torch.Tensor:
        """The prompt and its greedy continuation (1, n + generated), decoded from `reuse`'s cache.

        Prompt lookup decoding: drafts of up to 10 tokens copied from the prompt after a matching n-gram, verified
        in one forward pass. Code repeats what the prompt shows (retrieved blocks, the file above), and a token
        costs the same weight reads as ten on this memory-bound CPU path; greedy output is kept.
        generate(prompt_lookup_num_tokens=...) cannot start from a filled cache: the same loop, which can."""
        from repocomp.backends.greedy import generate_greedy

        head = loaded.output_head if self.fast_output_head else None
        return generate_greedy(loaded.model, input_ids, reuse.cache, reuse.reused, request.max_new_tokens, stop,
                               _PROMPT_LOOKUP_TOKENS, head=head, chunk=loaded.prefix_cache.chunk)

    def _sample(self, loaded: _LoadedModel, request: GenerationRequest, attention_mask: torch.Tensor,
                input_ids: torch.Tensor, reuse: Reuse, stop: StopRules) -> torch.Tensor:
        """The prompt and a sampled continuation (1, n + generated) through transformers' `generate`, from `reuse`'s
        cache with the rest of the prompt's aligned chunks prefilled first."""
        import torch
        from transformers import StoppingCriteriaList

        from repocomp.backends.prefix_cache import cache_argument, prefill_aligned

        model, tok = loaded.model, loaded.tokenizer
        prefill_aligned(model, input_ids, reuse.cache, reuse.reused, loaded.prefix_cache.chunk)
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        out = model.generate(
            input_ids,
            attention_mask=attention_mask.to(self.device),
            max_new_tokens=request.max_new_tokens,
            stopping_criteria=StoppingCriteriaList([stop]),
            pad_token_id=pad,
            **{cache_argument(model): reuse.cache},
            do_sample=True,
            temperature=request.temperature,
        )
        assert isinstance(out, torch.Tensor)  # the sequences alone: no return_dict_in_generate
        return out

    async def agenerate(self, request: GenerationRequest) -> Generation:
        await self._ensure_loaded()
        try:
            text, n, at_time_limit = await generate_in_thread(self._generate, request)
        except BackendError:
            raise
        except (RuntimeError, ValueError) as exc:
            raise BackendError(f"transformers: generation failed: {exc}") from None
        text, _ = apply_stops(text, request.stop)
        log.debug("transformers generated %d tokens", n)
        return Generation(text=text, backend=self.name, at_time_limit=at_time_limit)

    async def astream(self, request: GenerationRequest) -> AsyncIterator[str]:
        """One piece, the whole completion (token streaming in-process buys an editor little)."""
        yield (await self.agenerate(request)).text

    async def aload(self) -> None:
        await self._ensure_loaded()

    def cache_stats(self) -> dict[str, int | float]:
        """Prefix reuse so far, over the backends sharing this model: requests, hits (a request that reused a
        cached prefix), hit_rate, reused_tokens and prefilled_tokens (prompt tokens taken from a cache and computed),
        entries and tokens (what the cache holds now)."""
        if self._loaded is None:
            return {"requests": 0, "hits": 0, "hit_rate": 0.0, "reused_tokens": 0, "prefilled_tokens": 0,
                    "entries": 0, "tokens": 0}
        return self._loaded.prefix_cache.stats()

    def stats(self) -> dict[str, Any]:
        """The model (as configured), its dtype setting, prefix reuse (`cache_stats`) and the fast output head's
        steps (`output_head_stats`)."""
        return {"model": self.model_name, "dtype": str(self.dtype), "prefix_cache": self.cache_stats(),
                "output_head": self.output_head_stats()}

    def output_head_stats(self) -> dict[str, int | float]:
        """The fast output head's steps so far (output_head.py), over the backends sharing this model: accepted
        (the fp16 pass certified the token), fallbacks (the full lm_head ran), fallback_rate; zeros without one."""
        head = self._loaded.output_head if self._loaded is not None else None
        return head.stats() if head is not None else {"accepted": 0, "fallbacks": 0, "fallback_rate": 0.0}

    async def aclose(self) -> None:
        self._loaded = None  # the weights go when no other backend holds them
