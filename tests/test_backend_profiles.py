"""A backend owns what it knows of its model (`profile`), and the backends are found by name in one table
(`repocomp.backends.registry.BACKENDS`): a runtime added there is resolved and built with no other change."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

import repocomp.backends.model_defaults
import repocomp.pipeline
from repocomp.backends import factory, registry
from repocomp.backends.base import Capabilities, Generation, GenerationRequest
from repocomp.backends.fallback import FallbackBackend
from repocomp.backends.model_defaults import resolve_config
from repocomp.backends.profile import QWEN_STOP_TOKENS, ModelProfile, format_stops
from repocomp.config.schema import BackendConfig, Config


def test_each_backend_says_its_models_defaults() -> None:
    cpu, cuda = BackendConfig(device="cpu"), BackendConfig(device="cuda", max_new_tokens=64)
    for name in ("openvino", "llamacpp", "transformers"):
        assert factory.backend_class(name).profile(cpu) == ModelProfile(1024, 1, 48)
    assert factory.backend_class("transformers").profile(cuda) == ModelProfile(4096 - 64, 2, 128)
    assert factory.backend_class("extractive").profile(cpu) == ModelProfile(4096 - 128, 2, 128)
    vllm = factory.backend_class("vllm")
    assert vllm.profile(BackendConfig(model="Qwen/Qwen2.5-Coder-7B")).qwen_format
    assert not vllm.profile(BackendConfig(model="codellama/CodeLlama-7b-hf")).qwen_format
    assert format_stops("qwen", "comments") == format_stops("none", "files") == QWEN_STOP_TOKENS
    assert format_stops("none", "comments") == ()
    with pytest.raises(Exception, match="unknown backend 'nope'"):
        factory.backend_class("nope")


@dataclass
class ToyBackend:
    """A runtime this test adds: a model that always answers `pass`, with a profile of its own."""

    name = "toy"
    capabilities = Capabilities(writes=True, in_process=False)

    @classmethod
    def profile(cls, config: BackendConfig) -> ModelProfile:
        return ModelProfile(budget=700, rounds=3, max_new_tokens=9, qwen_format=True)

    @classmethod
    def from_config(cls, config: BackendConfig) -> ToyBackend:
        return cls()

    async def agenerate(self, request: GenerationRequest) -> Generation:
        return Generation("pass", self.name)

    async def aload(self) -> None:
        pass

    async def aclose(self) -> None:
        pass

    def stats(self) -> dict[str, object]:
        return {}


def test_a_runtime_added_in_one_line_is_resolved_and_built(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry.BACKENDS, "toy", (__name__, "ToyBackend"))
    config = resolve_config(Config().replace("backend", name="toy"))
    assert (config.prompt.max_tokens, config.retrieval.iterations, config.backend.max_new_tokens) == (700, 3, 9)
    assert (config.prompt.fim, config.prompt.layout) == ("qwen", "files")
    backend = factory.make_backend(config.backend)
    assert isinstance(backend, FallbackBackend) and isinstance(backend.primary, ToyBackend)


@pytest.mark.parametrize("module", [repocomp.backends.model_defaults, repocomp.pipeline])
def test_no_backend_or_model_name_is_compared_outside_the_backends(module: object) -> None:
    source = Path(str(getattr(module, "__file__", ""))).read_text(encoding="utf-8")
    names = [*registry.BACKENDS, "qwen2", "codellama", "gemma"]
    found = [n for n in names if re.search(rf"[\"']{re.escape(n)}", source, re.IGNORECASE)]
    assert found == []
