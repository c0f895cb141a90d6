"""The prompt's token budget follows the model that reads it (`[prompt] max_tokens = 0`, the default).

- Any served model (vLLM: Code Llama by default): the FragRel paper's setting, Code Llama's 4,096-token context
  minus `max_new_tokens` (3,968 with the default 128). RepoCoder's reference prompt builder gives retrieved code
  2,000 of those tokens; here the in-file context keeps at most half and the blocks get the rest.
- The in-process local model on CPU (`transformers` on `cpu`, Gemma 3 270M): 2,048 tokens. Its prefill costs
  about 2.5 s per 2k tokens on 2 cores, and an editor waits for it; its own window would allow far more.
- No model (retrieval only, `--backend none`) or the extractive backend: the reference setting, as a served
  model would see it, so retrieval-only evaluations measure the default a user with Code Llama gets.

An explicit `max_tokens` always wins; `context_tokens = 0` means half of the budget.
"""

from __future__ import annotations

import dataclasses

from repocomp.config import BackendConfig, PromptConfig

__all__ = ["CODE_LLAMA_CONTEXT", "LOCAL_CPU_BUDGET", "model_budget", "resolve_prompt"]

CODE_LLAMA_CONTEXT = 4096
LOCAL_CPU_BUDGET = 2048


def model_budget(backend_name: str | None, backend: BackendConfig) -> int:
    """Default prompt budget for the backend that will read the prompt (`None`: none will)."""
    if backend_name == "transformers" and backend.device == "cpu":
        return LOCAL_CPU_BUDGET
    return max(256, CODE_LLAMA_CONTEXT - backend.max_new_tokens)


def resolve_prompt(prompt: PromptConfig, backend_name: str | None, backend: BackendConfig) -> PromptConfig:
    """`prompt` with `max_tokens`/`context_tokens` of 0 made concrete."""
    max_tokens = prompt.max_tokens or model_budget(backend_name, backend)
    context = min(prompt.context_tokens or max_tokens // 2, max_tokens)
    return dataclasses.replace(prompt, max_tokens=max_tokens, context_tokens=context)
