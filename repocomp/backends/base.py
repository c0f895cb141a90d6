"""The interface every backend speaks: a request, its answer, what a backend can do, and the protocol itself.

Callers tell backends apart by `Backend.capabilities`, never by name (a name is for reports and logs): whether a
model writes the answer (`writes`; the extractive backend copies retrieved code instead) and whether it runs in
this process (`in_process`: loading it pays one-time costs that a warm-up generation takes off the first
request). An answer says the same per request: `Generation.copied` (the text was copied from retrieved code) and
`Generation.fell_back` (the configured backend failed and the fallback answered).

This module imports no backend, so the backends and the factory (`repocomp.backends.factory`) import it without
importing each other.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

__all__ = [
    "Backend",
    "Capabilities",
    "Generation",
    "GenerationRequest",
    "ModelTurns",
    "PrefillingBackend",
    "ReuseCounts",
    "StreamingBackend",
    "apply_stops",
    "generate_in_thread",
    "loop_deadline",
    "should_stop",
]

T = TypeVar("T")


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
    # time.monotonic() by which the whole completion (all rounds) must be answered: the pipeline cancels the
    # generation then; a backend that waits on a network (vLLM) bounds its waits by it too
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
    backend: str  # the backend that answered ("vllm", "transformers", "extractive"): for reports
    error: str = ""  # when a fallback answered: why the configured backend failed
    at_time_limit: bool = False  # max_time_s stopped the generation: the text is what came before
    # the text was copied from retrieved code (the extractive backend, also as the fallback), not written by a model:
    # it is whole tokens of the buffer's own text, cut by the backend itself
    copied: bool = False
    fell_back: bool = False  # the configured backend failed and a fallback answered (`error` says why)


@dataclass(frozen=True)
class Capabilities:
    """What a backend is, for the callers that must treat backends differently."""

    # a model writes the answer; False: the answer is copied from the retrieved code (the extractive backend)
    writes: bool
    # the model runs in this process: its first generation after loading pays one-time costs (kernel selection,
    # allocator growth), so `load_and_warm` runs a short one; a served model (vLLM) is warm already
    in_process: bool


@runtime_checkable
class Backend(Protocol):
    name: str

    @property
    def capabilities(self) -> Capabilities: ...

    async def agenerate(self, request: GenerationRequest) -> Generation: ...

    async def aload(self) -> None:
        """Make the first request fast (load weights); callers run it before a completion's clock starts."""
        ...

    async def aclose(self) -> None: ...

    def stats(self) -> dict[str, Any]:
        """The backend's counters for reports: for an in-process model its `model`, `dtype`, `prefix_cache`
        (prefix reuse) and `output_head` (the fast output head's steps); empty where there are none."""
        ...


@runtime_checkable
class PrefillingBackend(Backend, Protocol):
    async def aprefill(self, request: GenerationRequest) -> bool:
        """Compute the request's prompt into the model's prefix cache (under its `cache_key` where the cache keeps
        keys) and write nothing, so that a request whose prompt starts with it computes only the rest. Yields to any
        generation that waits (a request preempts it): False when it stopped before the end."""
        ...


class ModelTurns:
    """An in-process model's lock, counting the generations that wait for it: a prefill, done in pieces, stops
    between two once one waits."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.waiting = 0
        self._count = threading.Lock()

    @contextlib.contextmanager
    def turn(self) -> Iterator[None]:
        """The model, for a generation: counted as waiting until it has it."""
        with self._count:
            self.waiting += 1
        try:
            self.lock.acquire()
        finally:
            with self._count:
                self.waiting -= 1
        try:
            yield
        finally:
            self.lock.release()

    def prefill_stops(self, cancelled: threading.Event) -> bool:
        """Whether a prefill stops before its next piece: it was cancelled, or a generation waits for the model."""
        return cancelled.is_set() or self.waiting > 0


@runtime_checkable
class StreamingBackend(Backend, Protocol):
    def astream(self, request: GenerationRequest) -> AsyncIterator[str]: ...


def loop_deadline(deadline: float) -> float:
    """A time.monotonic() deadline on the running loop's clock (asyncio.timeout_at wants the latter)."""
    return asyncio.get_running_loop().time() + (deadline - time.monotonic())


def apply_stops(text: str, stops: tuple[str, ...]) -> tuple[str, bool]:
    """Cut `text` before the earliest stop sequence; returns (text, whether a stop was found)."""
    cut = min((i for i in (text.find(s) for s in stops if s) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


def should_stop(text: str, stops: tuple[str, ...], finished: Callable[[str], bool] | None) -> bool:
    """Whether a generation's text so far holds a stop sequence or is finished (the request's `finished`)."""
    return any(s in text for s in stops) or (finished is not None and finished(text))


@dataclass
class ReuseCounts:
    """Prefix reuse of an in-process model's prompts, summed over requests (its `stats()["prefix_cache"]`)."""

    requests: int = 0
    hits: int = 0  # requests that reused a prefix
    reused_tokens: int = 0  # prompt tokens taken from what the model held
    prefilled_tokens: int = 0  # prompt tokens computed

    def add(self, reused: int, prompt: int) -> None:
        """One request: `reused` of its `prompt` tokens were held already."""
        self.requests += 1
        self.hits += reused > 0
        self.reused_tokens += reused
        self.prefilled_tokens += prompt - reused

    def as_stats(self) -> dict[str, float]:
        return {"requests": self.requests, "hits": self.hits, "reused_tokens": self.reused_tokens,
                "prefilled_tokens": self.prefilled_tokens,
                "hit_rate": self.hits / self.requests if self.requests else 0.0}


async def generate_in_thread(work: Callable[..., T], *args: Any) -> T:
    """`work(*args, cancelled)` in a worker thread, for the in-process models: cancelling the await sets
    `cancelled`, which the work checks after every token, so the thread's work stops too, not just the await."""
    cancelled = threading.Event()
    try:
        return await asyncio.to_thread(work, *args, cancelled)
    except asyncio.CancelledError:
        cancelled.set()
        raise
