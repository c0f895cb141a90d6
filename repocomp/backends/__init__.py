"""LLM backends behind one small interface.

- `vllm`: a vLLM server (or several) over its OpenAI-compatible `/v1/completions` HTTP API, streaming.
- `transformers`: in-process generation with a local causal LM (torch and transformers imported lazily).
- `extractive`: no model: the continuation found in the best retrieved fragment.
- `auto` (the default): `transformers` with the local model when one is prepared, else `extractive`
  (`repocomp.local_model`).

`make_backend(config)` builds the configured one; with `fallback = "extractive"` a failing primary is answered
by the extractive backend instead, and `Generation.backend` says which one answered (`Generation.error` why the
primary did not). Every failure a user can cause surfaces as `repocomp.errors.BackendError`.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from repocomp.config import BackendConfig
from repocomp.errors import BackendError

__all__ = [
    "Backend",
    "FallbackBackend",
    "Generation",
    "GenerationRequest",
    "StreamingBackend",
    "apply_stops",
    "load_and_warm",
    "make_backend",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GenerationRequest:
    prompt: str  # the full prompt sent to a model (retrieved blocks + in-file context, or FIM-formatted)
    prefix: str  # buffer text before the cursor
    suffix: str  # buffer text after the cursor
    candidates: tuple[str, ...]  # retrieved block texts best-first (the code after the matched window when known)
    max_new_tokens: int
    stop: tuple[str, ...] = ()
    temperature: float = 0.0
    # True once more text cannot change the completion kept (postprocess.is_finished): backends stop there
    finished: Callable[[str], bool] | None = None
    # time.monotonic() by which the whole completion (all rounds) must be answered: backends give up by then
    deadline: float | None = None
    # seconds after the first token, past which the text so far is the answer (None: until finished or
    # max_new_tokens); the prompt's prefill does not count
    max_time_s: float | None = None
    # names the folder and the document the prompt is for: the in-process backend keeps the KV cache of recent
    # prompts per key and prefills only what follows the longest common prefix with one (never across keys);
    # None: no reuse (backends/prefix_cache.py)
    cache_key: str | None = None
    # the buffer's language (graph.languages' names): its comment rules, for the model-free backend's candidates
    language: str = "python"


@dataclass(frozen=True)
class Generation:
    text: str
    backend: str  # the backend that answered ("vllm", "transformers", "extractive")
    error: str = ""  # when a fallback answered: why the configured backend failed
    at_time_limit: bool = False  # max_time_s stopped the generation: the text is what came before


@runtime_checkable
class Backend(Protocol):
    name: str

    async def agenerate(self, request: GenerationRequest) -> Generation: ...

    async def aload(self) -> None:
        """Make the first request fast (load weights); callers run it before a completion's clock starts."""
        ...

    async def aclose(self) -> None: ...


@runtime_checkable
class StreamingBackend(Backend, Protocol):
    def astream(self, request: GenerationRequest) -> AsyncIterator[str]: ...


def apply_stops(text: str, stops: tuple[str, ...]) -> tuple[str, bool]:
    """Cut `text` before the earliest stop sequence; returns (text, whether a stop was found)."""
    cut = min((i for i in (text.find(s) for s in stops if s) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


class FallbackBackend:
    """Answers with `primary`; on a BackendError, with `fallback`, saying so in the Generation."""

    def __init__(self, primary: Backend, fallback: Backend) -> None:
        self.primary = primary
        self.fallback = fallback
        self.name = primary.name

    async def agenerate(self, request: GenerationRequest) -> Generation:
        try:
            return await self.primary.agenerate(request)
        except BackendError as exc:
            log.warning("backend %s failed (%s); answering with %s", self.primary.name, exc, self.fallback.name)
            gen = await self.fallback.agenerate(request)
            return Generation(text=gen.text, backend=gen.backend, error=f"{self.primary.name}: {exc}")

    async def astream(self, request: GenerationRequest) -> AsyncIterator[str]:
        """Streams from the primary when it can stream; falls back only if it fails before yielding text."""
        stream = getattr(self.primary, "astream", None)
        if stream is None:
            yield (await self.agenerate(request)).text
            return
        started = False
        try:
            async for piece in stream(request):
                started = True
                yield piece
        except BackendError as exc:
            if started:
                raise  # half a completion plus another backend's guess would be nonsense
            log.warning("backend %s failed (%s); answering with %s", self.primary.name, exc, self.fallback.name)
            yield (await self.fallback.agenerate(request)).text

    async def aload(self) -> None:
        try:
            await self.primary.aload()
        except Exception as exc:  # noqa: BLE001 - the first request reports it (and the fallback answers it)
            log.warning("backend %s could not load (%s: %s)", self.primary.name, type(exc).__name__, exc)

    async def aclose(self) -> None:
        try:
            await self.primary.aclose()
        finally:
            await self.fallback.aclose()


# About a thousand tokens of ordinary code, as long as the local model's prompts: the kernels chosen for a short
# prompt are not those of a full one (a 300-token warm-up left the first real request at 2.2x the median).
_WARM_UP_PROMPT = "".join(f"def step_{i}(state, value):\n    state.total += value * {i}\n    return state\n\n\n"
                          for i in range(40))


async def load_and_warm(backend: Backend) -> None:
    """Load the model, then run one short generation when it runs in process: a model's first run pays one-time
    costs (kernel selection, allocator growth) that would otherwise land on the first completion a developer
    waits for. A served model (vLLM) is warm already; the extractive backend has nothing to warm."""
    await backend.aload()
    if backend.name == "transformers":
        await backend.agenerate(GenerationRequest(prompt=_WARM_UP_PROMPT, prefix=_WARM_UP_PROMPT, suffix="",
                                                  candidates=(), max_new_tokens=4))


def make_backend(config: BackendConfig) -> Backend:
    """The configured backend, wrapped with the extractive fallback when `config.fallback == "extractive"`.

    Building never touches the network or loads weights: failures show up on the first request, where the
    fallback can catch them.
    """
    from repocomp.backends.extractive import ExtractiveBackend

    if config.name in ("auto", "transformers"):  # the local model, a catalog model's name, or a folder
        from repocomp.config import Config
        from repocomp.local_model import resolve

        config = resolve(Config(backend=config)).backend
    if config.name == "extractive":
        return ExtractiveBackend()
    primary: Backend
    try:
        if config.name == "vllm":
            from repocomp.backends.vllm import VLLMBackend

            primary = VLLMBackend.from_config(config)
        elif config.name == "transformers":
            from repocomp.backends.hf import TransformersBackend

            primary = TransformersBackend.from_config(config)
        else:
            raise BackendError(f"unknown backend {config.name!r}: use auto, extractive, vllm or transformers")
    except BackendError:
        if config.fallback != "extractive":
            raise
        log.warning("backend %s unusable; using extractive", config.name, exc_info=True)
        return ExtractiveBackend()
    if config.fallback == "extractive":
        return FallbackBackend(primary, ExtractiveBackend())
    return primary
