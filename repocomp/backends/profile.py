"""What a backend says of the model it serves: the defaults a 0 or "auto" in the configuration stands for.

Each backend class gives its `profile(config)` (`ModelProfile`); `repocomp.backends.model_defaults.resolve_config`
reads it once, when the configuration is resolved, and nothing after that asks which backend or model it is. The
shared knowledge of models lives here:

- a served model (vLLM: Code Llama by default) or none: the FragRel paper's setting, Code Llama's 4,096-token
  context minus the token cap (3,968 with the default 128), RepoCoder's 2 rounds. RepoCoder's reference prompt
  builder gives retrieved code 2,000 of those tokens; here the in-file context keeps at most half and the blocks
  get the rest. No model (retrieval only) or the extractive backend gets the same, so that retrieval-only
  evaluations measure the default a user with Code Llama gets;
- a model in this process on a CPU: 1,024 prompt tokens (its prefill costs about 1.2 s per 1k tokens on 2 cores
  and an editor waits for it; its own window would allow far more), 1 round (each round pays the prefill again,
  and the second moved EM inside the noise with both local models: Qwen2.5-Coder 0.5B -2 line, +2 API on 100 + 100
  tasks; Gemma 3 270M -0.50, -1.75 on 400 + 400; docs/evaluation.md), 48 new tokens (67-130 ms each on 2 cores;
  generation stops earlier where postprocessing would cut, so the cap bounds only a run-on answer; a cap in
  tokens, not in seconds: a time limit gave different answers on a busy machine than on an idle one);
- the prompt's format: a model whose tokenizer has Qwen2.5-Coder's fill-in-the-middle and repository tokens (or
  a served model named Qwen2.5-Coder) reads its own format, `qwen` FIM in repository files (DESIGN.md, Serving),
  and its special tokens end an answer; any other model RepoCoder's comment layout and the prefix only.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CODE_LLAMA_CONTEXT", "QWEN_STOP_TOKENS", "ModelProfile", "format_stops", "has_qwen_tokens",
           "local_cpu_profile", "served_profile", "tokenizer_folder"]

CODE_LLAMA_CONTEXT = 4096
SERVED_MAX_NEW_TOKENS = 128

# Qwen2.5-Coder's special tokens that end a completion (its repository-level example's list)
QWEN_STOP_TOKENS = ("<|endoftext|>", "<|im_end|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
                    "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>")
_QWEN_FORMAT_TOKENS = ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|repo_name|>", "<|file_sep|>")


@dataclass(frozen=True)
class ModelProfile:
    """The defaults of the model a backend serves (each used where the configuration says 0 or "auto")."""

    budget: int  # prompt tokens
    rounds: int  # RepoCoder rounds
    max_new_tokens: int  # a round's token cap
    tokenizer: str = ""  # a folder whose tokenizer counts the prompt as the model does ("": none at hand)
    # the model reads Qwen2.5-Coder's format though its tokenizer is not at hand (a served model of that name)
    qwen_format: bool = False


def served_profile(max_new_tokens: int = 0, tokenizer: str = "", qwen_format: bool = False) -> ModelProfile:
    """A served model's defaults (and the reference's, where no model reads the prompt)."""
    cap = max_new_tokens or SERVED_MAX_NEW_TOKENS
    return ModelProfile(max(256, CODE_LLAMA_CONTEXT - cap), 2, SERVED_MAX_NEW_TOKENS, tokenizer, qwen_format)


def local_cpu_profile(tokenizer: str = "") -> ModelProfile:
    """An in-process model's defaults on a CPU."""
    return ModelProfile(1024, 1, 48, tokenizer)


@functools.lru_cache(maxsize=16)
def has_qwen_tokens(tokenizer_folder: str) -> bool:
    """Whether the tokenizer in the folder has Qwen2.5-Coder's fill-in-the-middle and repository tokens."""
    try:
        vocab = (Path(tokenizer_folder).expanduser() / "tokenizer.json").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return all(f'"{t}"' in vocab for t in _QWEN_FORMAT_TOKENS)


def format_stops(fim: str, layout: str) -> tuple[str, ...]:
    """The stop strings of a prompt format: Qwen2.5-Coder's special tokens for its FIM or repository files."""
    return QWEN_STOP_TOKENS if fim == "qwen" or layout == "files" else ()


def tokenizer_folder(model: str) -> str:
    """`model` when it is a folder with a tokenizer, else ""."""
    if not model:
        return ""
    folder = Path(model).expanduser()
    return str(folder) if (folder / "tokenizer.json").is_file() or (folder / "tokenizer_config.json").is_file() \
        else ""
