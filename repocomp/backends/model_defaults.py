"""Settings that follow the model that reads the prompt: a 0 or "auto" in the config means "the model's".

The model's values come from its backend (`profile(config)` of each backend class, `repocomp.backends.profile`
says what they are and why): `[prompt] max_tokens`, `[retrieval] iterations`, `[backend] max_new_tokens`, and
`[prompt] fim`/`layout` (Qwen2.5-Coder's format where the model reads it, else RepoCoder's comments and the prefix
only). No model (retrieval only, `reads_prompt=False`) gets the reference's, a served model's.

- `[definitions]`: the section needs a budget of `min_budget` tokens (2,048): at the local CPU model's 1,024 it
  took tokens from similar code and cost EM on line and API tasks (README, Evaluation), so that model's prompts
  carry similar code only unless `min_budget` is lowered or the budget raised.

An explicit value always wins; `context_tokens = 0` means half of the budget.

`resolve_config` is the one place that does all of it, and `[backend] name = "auto"` too: every entry point (the
CLI, the server's engine cache, the evaluation, the benchmarks) calls it once and hands the concrete config to the
backend, the `Completer` and the prompt builder, which never resolve again.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import cast

from repocomp.backends.factory import LocalRuntimeClass, backend_class
from repocomp.backends.local_model import MODELS, default_model_dir, prepared
from repocomp.backends.profile import ModelProfile, has_qwen_tokens, served_profile
from repocomp.backends.registry import AUTO_RUNTIMES, NO_MODEL
from repocomp.config.schema import BackendConfig, Config, PromptConfig
from repocomp.errors import RepocompError

__all__ = ["is_resolved", "model_profile", "prompt_format", "resolve_backend", "resolve_config", "resolve_for_model",
           "resolve_prompt"]


def model_profile(backend_name: str | None, backend: BackendConfig) -> ModelProfile:
    """The defaults of the model that reads the prompt: its backend's (`None`: none reads it, the reference's)."""
    if backend_name is None:
        return served_profile(backend.max_new_tokens)
    return backend_class(backend_name).profile(backend)


def prompt_format(prompt: PromptConfig, backend_name: str | None, backend: BackendConfig) -> tuple[str, str]:
    """(fim, layout) for the model that reads the prompt, "auto" made concrete."""
    qwen = bool(prompt.tokenizer) and has_qwen_tokens(prompt.tokenizer) or \
        model_profile(backend_name, backend).qwen_format
    fim = prompt.fim if prompt.fim != "auto" else ("qwen" if qwen else "none")
    layout = prompt.layout if prompt.layout != "auto" else ("files" if qwen else "comments")
    return fim, layout


def resolve_prompt(prompt: PromptConfig, backend_name: str | None, backend: BackendConfig) -> PromptConfig:
    """`prompt` with `max_tokens`/`context_tokens` of 0 and `fim`/`layout` of "auto" made concrete."""
    max_tokens = prompt.max_tokens or model_profile(backend_name, backend).budget
    context = min(prompt.context_tokens or max_tokens // 2, max_tokens)
    fim, layout = prompt_format(prompt, backend_name, backend)
    return dataclasses.replace(prompt, max_tokens=max_tokens, context_tokens=context, fim=fim, layout=layout)


def resolve_for_model(config: Config, backend_name: str | None) -> Config:
    """`config` with every "the model's" 0 made concrete for the backend `backend_name` (`None`: no model)."""
    profile = model_profile(backend_name, config.backend)
    prompt = resolve_prompt(config.prompt, backend_name, config.backend)
    definitions = config.definitions.enabled and prompt.max_tokens >= config.definitions.min_budget
    return dataclasses.replace(
        config, prompt=prompt,
        retrieval=dataclasses.replace(config.retrieval, iterations=config.retrieval.iterations or profile.rounds),
        backend=dataclasses.replace(config.backend,
                                    max_new_tokens=config.backend.max_new_tokens or profile.max_new_tokens),
        definitions=dataclasses.replace(config.definitions, enabled=definitions))


def _in_process(name: str) -> bool:
    """Whether `name` ("auto" or a backend's) runs a model in this process (the local model's names)."""
    return name == "auto" or backend_class(name).capabilities.in_process


def resolve_backend(config: Config) -> Config:
    """`config` with the backend made concrete and the prompt's tokenizer made the model's own.

    - `name = "auto"`: the prepared local model in process (the first of `AUTO_RUNTIMES` that runs it here), else
      `NO_MODEL` (the extractive backend);
    - an in-process runtime's name with no `model`: the prepared local model;
    - `name` "auto" or an in-process runtime's with a catalog model's name (`model list`): that model, which must
      be prepared;
    - `[prompt] tokenizer = ""`: the tokenizer the backend's profile names counts the prompt budget.
    """
    backend = config.backend
    if backend.model in MODELS and _in_process(backend.name):
        model = prepared(default_model_dir(backend.model))
        if model is None:
            raise RepocompError(f"the model {backend.model} is not prepared: run `repocomp model prepare "
                                f"{backend.model}` (after pip install 'repocomp[{MODELS[backend.model].extra}]')")
        config = config.replace("backend", name=_runtime(backend, model.path), model=str(model.path))
    elif backend.name == "auto" or (not backend.model and _in_process(backend.name)):
        model = prepared()
        local = _runtime(backend, model.path) if model is not None else ""
        if model is not None and (backend.name != "auto" or _runs_here(local, backend, model.path)):
            config = config.replace("backend", name=local, model=str(model.path))
        elif backend.name == "auto":
            config = config.replace("backend", name=NO_MODEL)
    if not config.prompt.tokenizer:
        folder = backend_class(config.backend.name).profile(config.backend).tokenizer
        if folder:
            config = dataclasses.replace(config, prompt=dataclasses.replace(config.prompt, tokenizer=folder))
    return config


def _runs_here(name: str, backend: BackendConfig, folder: Path) -> bool:
    return cast(LocalRuntimeClass, backend_class(name)).runs_here(backend, folder)


def _runtime(backend: BackendConfig, folder: Path) -> str:
    """The in-process runtime that runs the prepared model in `folder`: the one named, or for "auto" the first of
    `AUTO_RUNTIMES` that runs it here (the last where none does)."""
    if backend.name != "auto":
        return backend.name
    return next((name for name in AUTO_RUNTIMES[:-1] if _runs_here(name, backend, folder)), AUTO_RUNTIMES[-1])


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
