"""Resolved configurations for tests that call the engine's parts directly (which take resolved configs only)."""

from __future__ import annotations

from typing import Any

from repocomp.backends.model_defaults import resolve_prompt
from repocomp.config.schema import BackendConfig, PromptConfig


def prompt_config(**overrides: Any) -> PromptConfig:
    """`PromptConfig(**overrides)` as a run with no model reads it: "the model's" 0s and "auto" made the
    reference's (RepoCoder's comment layout, no FIM, Code Llama's budget)."""
    return resolve_prompt(PromptConfig(**overrides), None, BackendConfig())
