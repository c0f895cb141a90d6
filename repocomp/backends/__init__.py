"""LLM backends behind one small interface.

- `vllm`: a vLLM server (or several) over its OpenAI-compatible `/v1/completions` HTTP API, streaming.
- `transformers`: in-process generation with a local causal LM (torch and transformers imported lazily).
- `openvino` and `llamacpp`: in-process generation from the local model's GGUF file through OpenVINO GenAI
  (its Q8_0 copy) or llama.cpp (as shipped).
- `extractive`: no model: the continuation found in the best retrieved fragment.
- `auto` (the default): the prepared local model through the first runtime of `registry.AUTO_RUNTIMES` that runs
  it here (OpenVINO GenAI, else transformers), else `extractive` (`repocomp.backends.model_defaults`).

The modules: `base` the interface (`GenerationRequest`, `Generation`, `Capabilities`, `Backend`), `profile` what a
backend says of its model (`ModelProfile`: budget, rounds, token cap, tokenizer, prompt format), `registry` the
backends by name (adding a runtime: its module and one line there), `fallback` a backend answered by another when it
fails, `factory` building and warming the configured one; `extractive`, `hf`, `openvino`, `llama_cpp` and `vllm` the
backends (each imports `base`, never this package).

`make_backend(config)` builds the configured one; with `fallback = "extractive"` a failing primary is answered
by the extractive backend instead, and `Generation.backend` says which one answered (`Generation.fell_back` that
a fallback did, `Generation.error` why the primary did not). Callers tell backends apart by their `capabilities`,
not their names. Every failure a user can cause surfaces as `repocomp.errors.BackendError`.
"""

from __future__ import annotations

from repocomp.backends.base import (
    Backend,
    Capabilities,
    Generation,
    GenerationRequest,
    StreamingBackend,
    apply_stops,
)
from repocomp.backends.factory import load_and_warm, make_backend
from repocomp.backends.fallback import FallbackBackend

__all__ = [
    "Backend",
    "Capabilities",
    "FallbackBackend",
    "Generation",
    "GenerationRequest",
    "StreamingBackend",
    "apply_stops",
    "load_and_warm",
    "make_backend",
]
