"""The backend interface (repocomp/backends/base.py): what each backend says it is (`capabilities`), what an answer
says of itself (`Generation.copied`, `Generation.fell_back`), each backend's `stats()`, the warm-up only for a
model in this process (`load_and_warm`), and a package without import cycles.

Real backends throughout: the extractive one, vLLM over httpx's mock transport (no server), and the transformers
one on the tiny locally built model (tests/tiny_model.py).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from repocomp.backends import (
    Backend,
    Capabilities,
    FallbackBackend,
    Generation,
    GenerationRequest,
    load_and_warm,
    make_backend,
)
from repocomp.backends.extractive import ExtractiveBackend
from repocomp.backends.hf import TransformersBackend
from repocomp.backends.llama_cpp import LlamaCppBackend
from repocomp.backends.vllm import VLLMBackend
from repocomp.config.schema import BackendConfig, VllmConfig

REPO_ROOT = Path(__file__).resolve().parent.parent
PREFIX = "x = compute("
REQUEST = GenerationRequest(prompt=PREFIX, prefix=PREFIX, suffix="", candidates=("x = compute(1)\n",),
                            max_new_tokens=8)
HEAD_STATS = {"accepted", "fallbacks", "fallback_rate"}
CACHE_STATS = {"requests", "hits", "hit_rate", "reused_tokens", "prefilled_tokens", "entries", "tokens"}


def vllm(status: int = 200, text: str = "1, 2)") -> tuple[VLLMBackend, list[httpx.Request]]:
    """A vLLM backend whose server answers every completion with `status` (and `text` when 200)."""
    seen: list[httpx.Request] = []

    def respond(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if status != 200:
            return httpx.Response(status, json={"error": {"message": "refused"}})
        return httpx.Response(200, json={"choices": [{"text": text}]})

    return VLLMBackend(["http://a:1"], model="m", stream=False, transport=httpx.MockTransport(respond)), seen


class CountingExtractive(ExtractiveBackend):
    """The extractive backend, counting its generations."""

    def __init__(self) -> None:
        self.generations = 0

    async def agenerate(self, request: GenerationRequest) -> Generation:
        self.generations += 1
        return await super().agenerate(request)


@pytest.fixture(scope="module")
def hf_backend(tiny_model_dir: Path) -> TransformersBackend:
    return TransformersBackend(model=str(tiny_model_dir), device="cpu")


# ---- capabilities ---------------------------------------------------------------------------------------------


def test_each_backend_says_whether_a_model_writes_and_whether_it_runs_here(tmp_path: Path) -> None:
    backend, _ = vllm()
    assert ExtractiveBackend().capabilities == Capabilities(writes=False, in_process=False)
    assert backend.capabilities == Capabilities(writes=True, in_process=False)
    assert TransformersBackend(model=str(tmp_path)).capabilities == Capabilities(writes=True, in_process=True)
    assert LlamaCppBackend(model=str(tmp_path)).capabilities == Capabilities(writes=True, in_process=True)
    for b in (ExtractiveBackend(), backend, TransformersBackend(model=str(tmp_path)), LlamaCppBackend(str(tmp_path))):
        assert isinstance(b, Backend)


def test_a_fallback_backend_is_its_primary_to_its_callers(tmp_path: Path) -> None:
    built = make_backend(BackendConfig(name="transformers", model=str(tmp_path / "nope"), fallback="extractive"))
    assert isinstance(built, FallbackBackend) and isinstance(built, Backend)
    assert built.name == "transformers" and built.capabilities == Capabilities(writes=True, in_process=True)
    served = make_backend(BackendConfig(name="vllm", vllm=VllmConfig(endpoints=("http://127.0.0.1:9",)),
                                        fallback="extractive"))
    assert served.capabilities == Capabilities(writes=True, in_process=False)
    with pytest.raises(AttributeError):  # frozen
        served.capabilities.writes = False  # type: ignore[misc]


# ---- what an answer says of itself ----------------------------------------------------------------------------


async def test_an_extractive_answer_is_copied() -> None:
    gen = await ExtractiveBackend().agenerate(REQUEST)
    assert gen == Generation(text="1)", backend="extractive", copied=True)
    assert not gen.fell_back and not gen.error


async def test_a_models_answer_is_written_not_copied() -> None:
    backend, _ = vllm()
    gen = await FallbackBackend(backend, ExtractiveBackend()).agenerate(REQUEST)
    assert gen == Generation(text="1, 2)", backend="vllm")  # copied, fell_back False: the primary answered
    await backend.aclose()


async def test_the_fallback_answers_a_failing_primary_and_says_so() -> None:
    backend, seen = vllm(status=400)
    gen = await FallbackBackend(backend, ExtractiveBackend()).agenerate(REQUEST)
    assert len(seen) == 1  # the primary was asked, and refused
    assert gen.fell_back and gen.copied and gen.backend == "extractive" and gen.text == "1)"
    assert gen.error.startswith("vllm: ") and "HTTP 400" in gen.error
    await backend.aclose()


async def test_a_primary_that_cannot_load_is_answered_by_the_fallback(tmp_path: Path) -> None:
    built = make_backend(BackendConfig(name="transformers", model=str(tmp_path / "nope"), fallback="extractive"))
    gen = await built.agenerate(REQUEST)
    assert gen.fell_back and gen.copied and gen.backend == "extractive" and "cannot load model" in gen.error


# ---- stats ----------------------------------------------------------------------------------------------------


async def test_stats_of_each_backend(hf_backend: TransformersBackend) -> None:
    backend, _ = vllm()
    assert ExtractiveBackend().stats() == {} and backend.stats() == {}
    assert FallbackBackend(backend, ExtractiveBackend()).stats() == {}
    await hf_backend.aload()
    await hf_backend.agenerate(REQUEST)
    stats = hf_backend.stats()
    assert set(stats) == {"model", "dtype", "prefix_cache", "output_head"}
    assert stats["model"] == hf_backend.model_name and stats["dtype"] == "auto"
    assert set(stats["prefix_cache"]) == CACHE_STATS and stats["prefix_cache"]["requests"] >= 1
    assert set(stats["output_head"]) == HEAD_STATS
    assert stats["prefix_cache"] == hf_backend.cache_stats()
    assert stats["output_head"] == hf_backend.output_head_stats()
    assert FallbackBackend(hf_backend, ExtractiveBackend()).stats() == stats


def test_stats_of_a_model_not_loaded_yet_are_zeros(tmp_path: Path) -> None:
    stats = TransformersBackend(model=str(tmp_path), dtype="float32").stats()
    assert stats["dtype"] == "float32" and stats["model"] == str(tmp_path)
    assert stats["prefix_cache"]["requests"] == 0 and stats["output_head"]["accepted"] == 0


# ---- load_and_warm --------------------------------------------------------------------------------------------


async def test_load_and_warm_warms_a_model_in_this_process(hf_backend: TransformersBackend) -> None:
    await hf_backend.aload()
    before = hf_backend.cache_stats()["requests"]
    await load_and_warm(hf_backend)
    assert hf_backend.cache_stats()["requests"] == before + 1  # one warm-up generation
    await load_and_warm(FallbackBackend(hf_backend, ExtractiveBackend()))  # the primary's capabilities decide
    assert hf_backend.cache_stats()["requests"] == before + 2


async def test_load_and_warm_does_not_generate_with_a_served_model_or_none() -> None:
    backend, seen = vllm()
    await load_and_warm(backend)
    assert seen == []  # a served model is warm already
    fallback = CountingExtractive()
    await load_and_warm(FallbackBackend(backend, fallback))
    assert seen == [] and fallback.generations == 0
    extractive = CountingExtractive()
    await load_and_warm(extractive)
    assert extractive.generations == 0  # nothing to warm
    await backend.aclose()


# ---- imports --------------------------------------------------------------------------------------------------


def _type_checking(node: ast.AST) -> bool:
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The repocomp modules `path` imports, lazily too (inside functions); not those under `if TYPE_CHECKING:`.
    `from package import module` names the module."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in modules else node.module)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return found & modules


def _import_graph() -> dict[str, set[str]]:
    paths = {".".join(p.relative_to(REPO_ROOT).with_suffix("").parts).removesuffix(".__init__"): p
             for p in (REPO_ROOT / "repocomp").rglob("*.py")}
    return {m: _imports(p, set(paths)) - {m} for m, p in paths.items()}


def _reaches(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = list(graph[start])
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(graph.get(m, ()))
    return seen


def test_no_backends_module_imports_a_module_that_imports_it_back() -> None:
    graph = _import_graph()
    cycles = [m for m in graph if (m.startswith("repocomp.backends") or m == "repocomp.backends.local_model")
              and m in _reaches(graph, m)]
    assert cycles == []


def test_the_backends_import_the_interface_not_the_package() -> None:
    graph = _import_graph()
    for name in ("base", "fallback", "factory", "extractive", "hf", "vllm", "greedy", "prefix_cache"):
        assert "repocomp.backends" not in graph[f"repocomp.backends.{name}"], name
    # model preparation uses the openvino backend's weight writer, a leaf that imports nothing of the backends
    prepares_with = [m for m in graph["repocomp.backends.local_model"] if m.startswith("repocomp.backends")]
    assert prepares_with == ["repocomp.backends.openvino_weights"]
    assert not any(m.startswith("repocomp.backends") for m in graph["repocomp.backends.openvino_weights"])


def test_the_checker_sees_lazy_imports_and_skips_type_checking_ones(tmp_path: Path) -> None:
    source = tmp_path / "mod.py"
    source.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from repocomp import config\n"
                      "def f():\n    from repocomp.backends import base\n    import repocomp.errors\n")
    modules = {"repocomp.config", "repocomp.backends", "repocomp.backends.base", "repocomp.errors"}
    assert _imports(source, modules) == {"repocomp.backends.base", "repocomp.errors"}


def test_importing_the_package_imports_no_backend() -> None:
    code = ("import json, sys, repocomp.backends; "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('repocomp.backends.'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO_ROOT)
    assert json.loads(out.stdout) == ["repocomp.backends.base", "repocomp.backends.factory",
                                      "repocomp.backends.fallback", "repocomp.backends.registry"]
