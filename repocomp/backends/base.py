"""The interface every backend speaks: a request, its answer, and the protocol itself.

This module imports no backend, so the backends and the factory (`repocomp.backends.factory`) import it without
importing each other.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = [
    "Backend",
    "Generation",
    "GenerationRequest",
    "StreamingBackend",
    "apply_stops",
]


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
