"""Settings that follow the model that reads the prompt: a 0 in the config means "the model's".

- `[prompt] max_tokens = 0`. Any served model (vLLM: Code Llama by default): the FragRel paper's setting, Code
  Llama's 4,096-token context minus `max_new_tokens` (3,968 with the default 128). RepoCoder's reference prompt
  builder gives retrieved code 2,000 of those tokens; here the in-file context keeps at most half and the blocks
  get the rest. The in-process local model on CPU (`transformers` on `cpu`, Gemma 3 270M): 1,024 tokens, because
  its prefill costs about 1.2 s per 1k tokens on 2 cores and an editor waits for it (its own window would allow
  far more). No model (retrieval only, `--backend none`) or the extractive backend: the reference setting, as a
  served model would see it, so retrieval-only evaluations measure the default a user with Code Llama gets.
- `[retrieval] iterations = 0`: RepoCoder's 2 rounds; 1 for the in-process local model on CPU, where each round
  pays the prefill again and the second round moved EM inside the noise with both local models (Qwen2.5-Coder
  0.5B: -2 line, +2 API on 100 + 100 tasks; Gemma 3 270M: -0.50, -1.75 on 400 + 400; docs/evaluation.md).
- `[backend] max_new_tokens = 0`: 128 new tokens; 48 for the in-process local model on CPU, whose tokens cost
  67-130 ms each on 2 cores. Generation stops earlier where postprocessing would cut (the end of the line or
  statement), so the cap bounds only a run-on answer. A cap in tokens, not in seconds: a time limit gave different
  answers on a busy machine than on an idle one (a third of the answers of a replay cut to a few characters).
- `[definitions]`: the section needs a budget of `min_budget` tokens (2,048): at the local CPU model's 1,024 it
  took tokens from similar code and cost EM on line and API tasks (README, Evaluation), so that model's prompts
  carry similar code only unless `min_budget` is lowered or the budget raised.

- `[prompt] fim = "auto"`, `layout = "auto"`: a model whose tokenizer has Qwen2.5-Coder's fill-in-the-middle and
  repository tokens (or a served model named Qwen2.5-Coder) gets its own format, `qwen` FIM in repository files
  (DESIGN.md, Serving); any other model RepoCoder's comment layout and the prefix only.

An explicit value always wins; `context_tokens = 0` means half of the budget.

`resolve_config` is the one place that does all of it, and `[backend] name = "auto"` too: every entry point (the
CLI, the server's engine cache, the evaluation, the benchmarks) calls it once and hands the concrete config to the
backend, the `Completer` and the prompt builder, which never resolve again.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from importlib.util import find_spec
from pathlib import Path

from repocomp.backends.local_model import MODELS, default_model_dir, prepared, runtime_missing
from repocomp.backends.openvino_weights import prepared_openvino_model
from repocomp.config.schema import BackendConfig, Config, PromptConfig
from repocomp.errors import RepocompError

__all__ = ["CODE_LLAMA_CONTEXT", "LOCAL_CPU_BUDGET", "QWEN_STOP_TOKENS", "is_resolved", "model_budget",
           "prompt_format", "resolve_backend", "resolve_config", "resolve_for_model", "resolve_prompt"]

CODE_LLAMA_CONTEXT = 4096
LOCAL_CPU_BUDGET = 1024
REPOCODER_ROUNDS = 2
LOCAL_CPU_ROUNDS = 1
SERVED_MAX_NEW_TOKENS = 128
LOCAL_CPU_MAX_NEW_TOKENS = 48


# Qwen2.5-Coder's special tokens that end a completion (its repository-level example's list)
QWEN_STOP_TOKENS = ("<|endoftext|>", "<|im_end|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
                    "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>")
_QWEN_FORMAT_TOKENS = ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|repo_name|>", "<|file_sep|>")
# the names a local model's name or no model resolves for
IN_PROCESS = ("auto", "transformers", "llamacpp", "openvino")
_QWEN_CODER_NAME = re.compile(r"qwen2\.5-coder", re.IGNORECASE)


@functools.lru_cache(maxsize=16)
def _has_qwen_tokens(tokenizer_folder: str) -> bool:
    try:
        vocab = (Path(tokenizer_folder).expanduser() / "tokenizer.json").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return all(f'"{t}"' in vocab for t in _QWEN_FORMAT_TOKENS)


def prompt_format(prompt: PromptConfig, backend_name: str | None, backend: BackendConfig) -> tuple[str, str]:
    """(fim, layout) for the model that reads the prompt, "auto" made concrete."""
    qwen = bool(prompt.tokenizer) and _has_qwen_tokens(prompt.tokenizer) or \
        backend_name == "vllm" and bool(_QWEN_CODER_NAME.search(backend.model))
    fim = prompt.fim if prompt.fim != "auto" else ("qwen" if qwen else "none")
    layout = prompt.layout if prompt.layout != "auto" else ("files" if qwen else "comments")
    return fim, layout


def _local_cpu(backend_name: str | None, backend: BackendConfig) -> bool:
    return backend_name in ("llamacpp", "openvino") or backend_name == "transformers" and backend.device == "cpu"


def model_budget(backend_name: str | None, backend: BackendConfig) -> int:
    """Default prompt budget for the backend that will read the prompt (`None`: none will)."""
    if _local_cpu(backend_name, backend):
        return LOCAL_CPU_BUDGET
    return max(256, CODE_LLAMA_CONTEXT - (backend.max_new_tokens or SERVED_MAX_NEW_TOKENS))


def resolve_prompt(prompt: PromptConfig, backend_name: str | None, backend: BackendConfig) -> PromptConfig:
    """`prompt` with `max_tokens`/`context_tokens` of 0 and `fim`/`layout` of "auto" made concrete."""
    max_tokens = prompt.max_tokens or model_budget(backend_name, backend)
    context = min(prompt.context_tokens or max_tokens // 2, max_tokens)
    fim, layout = prompt_format(prompt, backend_name, backend)
    return dataclasses.replace(prompt, max_tokens=max_tokens, context_tokens=context, fim=fim, layout=layout)


def resolve_for_model(config: Config, backend_name: str | None) -> Config:
    """`config` with every "the model's" 0 made concrete for the backend `backend_name` (`None`: no model)."""
    local_cpu = _local_cpu(backend_name, config.backend)
    rounds = config.retrieval.iterations or (LOCAL_CPU_ROUNDS if local_cpu else REPOCODER_ROUNDS)
    max_new = config.backend.max_new_tokens or (LOCAL_CPU_MAX_NEW_TOKENS if local_cpu else SERVED_MAX_NEW_TOKENS)
    prompt = resolve_prompt(config.prompt, backend_name, config.backend)
    definitions = config.definitions.enabled and prompt.max_tokens >= config.definitions.min_budget
    return dataclasses.replace(
        config, prompt=prompt,
        retrieval=dataclasses.replace(config.retrieval, iterations=rounds),
        backend=dataclasses.replace(config.backend, max_new_tokens=max_new),
        definitions=dataclasses.replace(config.definitions, enabled=definitions))


def resolve_backend(config: Config) -> Config:
    """`config` with the backend made concrete and the prompt's tokenizer made the model's own.

    - `name = "auto"`: the prepared local model in process (`_runtime` picks the runtime), else `extractive`;
    - an in-process runtime's name (`IN_PROCESS`) with no `model`: the prepared local model;
    - `name` "auto" or an in-process runtime's with a catalog model's name (`model list`): that model, which must
      be prepared;
    - `[prompt] tokenizer = ""` and a model folder with a tokenizer: that tokenizer counts the prompt budget.
    """
    backend = config.backend
    if backend.name in IN_PROCESS and backend.model in MODELS:
        model = prepared(default_model_dir(backend.model))
        if model is None:
            raise RepocompError(f"the model {backend.model} is not prepared: run `repocomp model prepare "
                                f"{backend.model}` (after pip install 'repocomp[{MODELS[backend.model].extra}]')")
        config = config.replace("backend", name=_runtime(backend, model.path), model=str(model.path))
    elif backend.name == "auto" or (backend.name in IN_PROCESS and not backend.model):
        model = prepared()
        local = _runtime(backend, model.path) if model is not None else "transformers"
        if model is not None and (local != "transformers" or not runtime_missing()):
            config = config.replace("backend", name=local, model=str(model.path))
        elif backend.name == "auto":
            config = config.replace("backend", name="extractive")
    backend = config.backend
    if not config.prompt.tokenizer:
        folder = _tokenizer_folder(backend.name, backend.model)
        if folder is not None:
            config = dataclasses.replace(config, prompt=dataclasses.replace(config.prompt, tokenizer=str(folder)))
    return config


def _runtime(backend: BackendConfig, folder: Path) -> str:
    """The in-process runtime that runs the prepared model in `folder`: the one named, or for "auto" OpenVINO GenAI
    on a CPU where it is installed and the folder has its weights (sooner answers than transformers on a CPU, the
    same answers within noise: docs/performance.md, docs/evaluation.md), else transformers."""
    if backend.name != "auto":
        return backend.name
    if backend.device == "cpu" and prepared_openvino_model(folder) is not None and find_spec("openvino_genai"):
        return "openvino"
    return "transformers"


def _tokenizer_folder(backend: str, model: str) -> Path | None:
    if backend in ("transformers", "llamacpp", "openvino") and model:
        folder = Path(model).expanduser()
    elif backend == "vllm":
        # `repocomp model serve` serves a prepared model under its name: count with the same tokenizer.
        local = prepared(default_model_dir(model) if model in MODELS else None)
        if local is None or model not in (local.name, str(local.path)):
            return None
        folder = local.path
    else:
        return None
    return folder if (folder / "tokenizer.json").is_file() or (folder / "tokenizer_config.json").is_file() else None


def resolve_config(config: Config, *, reads_prompt: bool = True) -> Config:
    """`config` made concrete, once, for whoever reads it: the backend ("auto", a catalog name), the tokenizer,
    and every "the model's" 0 and "auto" of the prompt, rounds, new tokens and definitions. `reads_prompt=False`:
    no model reads the prompt (retrieval only), which gets the reference's budget and rounds. Idempotent."""
    config = resolve_backend(config)
    return resolve_for_model(config, config.backend.name if reads_prompt else None)


def is_resolved(config: Config) -> bool:
    """Whether `config` has nothing left for `resolve_config` to decide (the consumers' check)."""
    b, p = config.backend, config.prompt
    return b.name != "auto" and b.max_new_tokens > 0 and config.retrieval.iterations > 0 and p.max_tokens > 0 \
        and p.context_tokens > 0 and "auto" not in (p.fim, p.layout)
