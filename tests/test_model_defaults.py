"""Settings that follow the model (repocomp.backends.model_defaults): a 0 in the config becomes the reading model's value."""

from __future__ import annotations

from pathlib import Path

import pytest

from repocomp.backends.hf import TransformersBackend
from repocomp.backends.model_defaults import is_resolved, resolve_config, resolve_for_model, resolve_prompt
from repocomp.config.schema import BackendConfig, Config, PromptConfig
from repocomp.index import Index
from repocomp.pipeline import Completer, CompletionOptions

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "content_repo"


def test_budget_follows_the_model() -> None:
    ref = resolve_prompt(PromptConfig(), None, BackendConfig())
    assert (ref.max_tokens, ref.context_tokens) == (4096 - 128, (4096 - 128) // 2)
    assert resolve_prompt(PromptConfig(), "vllm", BackendConfig(max_new_tokens=64)).max_tokens == 4096 - 64
    assert resolve_prompt(PromptConfig(), "transformers", BackendConfig(device="cpu")).max_tokens == 1024
    assert resolve_prompt(PromptConfig(), "transformers", BackendConfig(device="cuda")).max_tokens == 4096 - 128
    assert resolve_prompt(PromptConfig(max_tokens=1000), "transformers", BackendConfig()).max_tokens == 1000


def test_rounds_and_token_cap_follow_the_model_and_an_explicit_value_wins() -> None:
    def used(config: Config, backend: str | None) -> tuple[int, int, float]:
        c = resolve_for_model(config, backend)
        return c.retrieval.iterations, c.backend.max_new_tokens, c.backend.max_time_s

    assert used(Config(), None) == (2, 128, 0.0)  # no model (retrieval only): RepoCoder's reference
    assert used(Config(), "vllm") == (2, 128, 0.0)
    assert used(Config().replace("backend", device="cuda"), "transformers") == (2, 128, 0.0)
    # the local model on CPU: one round and 48 tokens; no time limit (answers must not depend on the load)
    assert used(Config(), "transformers") == (1, 48, 0.0)
    explicit = Config().replace("retrieval", iterations=3).replace("backend", max_time_s=9.0, max_new_tokens=200)
    assert used(explicit, "transformers") == (3, 200, 9.0) and used(explicit, "vllm") == (3, 200, 9.0)


def test_a_completer_on_the_cpu_model_runs_one_round_unless_told(tiny_model_dir: Path, tmp_path: Path) -> None:
    config = Config().replace("index", dir=str(tmp_path / "idx")).replace(
        "backend", name="transformers", model=str(tiny_model_dir), max_new_tokens=4)
    index = Index.build(FIXTURE, config)
    path = "ledger/refunds.py"
    text = (FIXTURE / path).read_text()

    def rounds(cfg: Config) -> int:
        completer = Completer(index, resolve_config(cfg), TransformersBackend(model=str(tiny_model_dir), device="cpu"))
        result = completer.complete(path, text, 13, len("    total_cents = "), CompletionOptions(trace=True))
        return sum(1 for k in result.timings_ms if k.startswith("generate_"))

    assert rounds(config) == 1
    assert rounds(config.replace("retrieval", iterations=2)) == 2


def test_definitions_need_their_budget() -> None:
    def shown(config: Config, backend: str | None) -> bool:
        return resolve_for_model(config, backend).definitions.enabled

    assert shown(Config(), None) and shown(Config(), "vllm")  # the reference budget: 3,968 tokens
    assert not shown(Config(), "transformers")  # the local CPU model's 1,024 tokens
    assert shown(Config().replace("prompt", max_tokens=2048), "transformers")
    assert shown(Config().replace("definitions", min_budget=0), "transformers")
    assert not shown(Config().replace("definitions", enabled=False), "vllm")


def test_a_completer_on_the_cpu_model_shows_definitions_only_with_the_budget(tiny_model_dir: Path,
                                                                              tmp_path: Path) -> None:
    config = Config().replace("index", dir=str(tmp_path / "idx")).replace(
        "backend", name="transformers", model=str(tiny_model_dir), max_new_tokens=4)
    index = Index.build(FIXTURE, config)
    path = "ledger/refunds.py"
    text = (FIXTURE / path).read_text()

    def definitions(cfg: Config) -> list[str]:
        completer = Completer(index, resolve_config(cfg), TransformersBackend(model=str(tiny_model_dir), device="cpu"))
        result = completer.complete(path, text, 13, len("    total_cents = "), CompletionOptions(trace=True))
        return [d.name for d in result.definitions]

    assert definitions(config) == []
    assert definitions(config.replace("definitions", min_budget=1024))


def test_configuration_is_resolved_once_and_consumers_refuse_an_unresolved_one(tmp_path: Path) -> None:
    """`resolve_config` decides everything ("auto" and the model's 0s), twice gives the same, and the parts that
    read the configuration take only its result."""
    from repocomp.backends import make_backend
    from repocomp.prompt.layout import build_prompt

    raw = Config()
    once = resolve_config(raw)
    assert not is_resolved(raw) and is_resolved(once) and resolve_config(once) == once
    assert once.backend.name == "extractive"  # the tests' cache has no prepared model
    assert (once.prompt.max_tokens, once.retrieval.iterations, once.backend.max_new_tokens) == (4096 - 128, 2, 128)
    assert resolve_config(raw.replace("backend", name="vllm"), reads_prompt=False).prompt.max_tokens == 4096 - 128
    with pytest.raises(ValueError, match="resolve_config"):
        Completer(None, raw)
    with pytest.raises(ValueError, match="resolve_prompt"):
        build_prompt([], "x = ", "", raw.prompt)
    with pytest.raises(ValueError, match="resolve_config"):
        make_backend(raw.backend)
    assert Completer(None, once).config is once
