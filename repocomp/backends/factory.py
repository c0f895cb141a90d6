"""The backends by name (`BACKENDS`, `backend_class`), building the configured one (`make_backend`) and readying
it before its first request (`load_and_warm`).

A backend's module is imported when its class is asked for, so importing `repocomp.backends` stays cheap: torch and
transformers (the in-process backend) or httpx (vLLM) load only for the backend configured.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Protocol

from repocomp.backends.base import Backend, Capabilities, GenerationRequest
from repocomp.backends.fallback import FallbackBackend
from repocomp.backends.registry import AUTO_RUNTIMES, BACKENDS, NO_MODEL
from repocomp.errors import BackendError

if TYPE_CHECKING:
    from pathlib import Path

    from repocomp.backends.profile import ModelProfile
    from repocomp.config.schema import BackendConfig

__all__ = ["AUTO_RUNTIMES", "BACKENDS", "NO_MODEL", "BackendClass", "backend_class", "load_and_warm", "make_backend"]

log = logging.getLogger(__name__)


class BackendClass(Protocol):
    """What a backend's class says before an instance exists."""

    capabilities: Capabilities

    def profile(self, config: BackendConfig) -> ModelProfile:
        """The defaults of the model it serves under `config` (`repocomp.backends.profile`)."""
        ...

    def from_config(self, config: BackendConfig) -> Backend: ...


class LocalRuntimeClass(BackendClass, Protocol):
    def runs_here(self, config: BackendConfig, folder: Path) -> bool:
        """Whether it can run the prepared model in `folder` on this machine."""
        ...

# About a thousand tokens of ordinary code, as long as the local model's prompts: the kernels chosen for a short
# prompt are not those of a full one (a 300-token warm-up left the first real request at 2.2x the median).
_WARM_UP_PROMPT = "".join(f"def step_{i}(state, value):\n    state.total += value * {i}\n    return state\n\n\n"
                          for i in range(40))


async def load_and_warm(backend: Backend) -> None:
    """Load the model, then run one short generation when it runs in process: a model's first run pays one-time
    costs (kernel selection, allocator growth) that would otherwise land on the first completion a developer
    waits for. A served model (vLLM) is warm already; the extractive backend has nothing to warm."""
    await backend.aload()
    if backend.capabilities.in_process:
        await backend.agenerate(GenerationRequest(prompt=_WARM_UP_PROMPT, prefix=_WARM_UP_PROMPT, suffix="",
                                                  candidates=(), max_new_tokens=4))


def make_backend(config: BackendConfig) -> Backend:
    """The configured backend, wrapped with the extractive fallback when `config.fallback == "extractive"`.

    Building never touches the network or loads weights: failures show up on the first request, where the
    fallback can catch them.
    """
    from repocomp.backends.extractive import ExtractiveBackend

    if config.name == "auto":
        raise ValueError("make_backend takes a resolved config: repocomp.backends.model_defaults.resolve_config first")
    if config.name == "extractive":
        return ExtractiveBackend()
    try:
        primary: Backend = backend_class(config.name).from_config(config)
    except BackendError:
        if config.fallback != "extractive":
            raise
        log.warning("backend %s unusable; using extractive", config.name, exc_info=True)
        return ExtractiveBackend()
    if config.fallback == "extractive":
        return FallbackBackend(primary, ExtractiveBackend())
    return primary


def backend_class(name: str) -> BackendClass:
    """The class of the backend `name` (its module imported now)."""
    if name not in BACKENDS:
        raise BackendError(f"unknown backend {name!r}: use {', '.join(BACKENDS)}")
    module, cls = BACKENDS[name]
    found: BackendClass = getattr(importlib.import_module(module), cls)
    return found
