"""Building the configured backend (`make_backend`) and readying it before its first request (`load_and_warm`).

The backends are imported when one is built, so importing `repocomp.backends` stays cheap: torch and transformers
(the in-process backend) or httpx (vLLM) load only for the backend configured.
"""

from __future__ import annotations

import logging

from repocomp.backends.base import Backend, GenerationRequest
from repocomp.backends.fallback import FallbackBackend
from repocomp.config.schema import BackendConfig
from repocomp.errors import BackendError

__all__ = ["load_and_warm", "make_backend"]

log = logging.getLogger(__name__)

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
    primary: Backend
    try:
        if config.name == "vllm":
            from repocomp.backends.vllm import VLLMBackend

            primary = VLLMBackend.from_config(config)
        elif config.name == "transformers":
            from repocomp.backends.hf import TransformersBackend

            primary = TransformersBackend.from_config(config)
        elif config.name == "llamacpp":
            from repocomp.backends.llama_cpp import LlamaCppBackend

            primary = LlamaCppBackend.from_config(config)
        elif config.name == "openvino":
            from repocomp.backends.openvino import OpenVINOBackend

            primary = OpenVINOBackend.from_config(config)
        else:
            raise BackendError(f"unknown backend {config.name!r}: use extractive, vllm, transformers, llamacpp or "
                               "openvino")
    except BackendError:
        if config.fallback != "extractive":
            raise
        log.warning("backend %s unusable; using extractive", config.name, exc_info=True)
        return ExtractiveBackend()
    if config.fallback == "extractive":
        return FallbackBackend(primary, ExtractiveBackend())
    return primary
