"""The catalog's models: chunks found through installed distributions' metadata (never imported), assembled in
order and checked against the pinned sha256; and the prompt format that follows the model."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

from repocomp.backends import local_model as lm
from repocomp.backends.model_defaults import prompt_format, resolve_backend
from repocomp.config.schema import BackendConfig, Config, PromptConfig
from repocomp.errors import RepocompError


def _fake_part(site: Path, dist: str, index: int, data: bytes) -> None:
    """An installed distribution `dist` holding one chunk, as pip lays a wheel out (dist-info with a RECORD)."""
    package = dist.replace("-", "_")
    chunk = site / package / "data" / f"part{index:02d}.bin"
    chunk.parent.mkdir(parents=True)
    chunk.write_bytes(data)
    (site / package / "__init__.py").write_text("raise ImportError('data only: never imported')\n")
    info = site / f"{package}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "RECORD").write_text(f"{package}/__init__.py,,\n{package}/data/part{index:02d}.bin,,\n"
                                 f"{package}-0.1.dist-info/METADATA,,\n{package}-0.1.dist-info/RECORD,,\n")


@pytest.fixture
def parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[bytes], lm.CatalogModel]:
    site = tmp_path / "site"
    chunks = [b"GGUF" + bytes([i]) * 1000 for i in range(3)]
    for i, data in enumerate(chunks):
        _fake_part(site, f"fake-model-part{i + 1}", i, data)
    monkeypatch.syspath_prepend(str(site))
    whole = b"".join(chunks)
    spec = lm.CatalogModel("fake", "Fake", "tests", "fake", tuple(f"fake-model-part{i}" for i in (1, 2, 3)),
                           r"/data/part\d+\.bin$", len(whole), hashlib.sha256(whole).hexdigest())
    return chunks, spec


def test_assembly_concatenates_the_chunks_in_order_and_checks_the_pinned_hash(parts, tmp_path: Path) -> None:
    chunks, spec = parts
    out = lm.assemble(spec, tmp_path / "model.gguf")
    assert out.read_bytes() == b"".join(chunks)
    assert not any(m.startswith("fake_model") for m in sys.modules)  # found through metadata, never imported


def test_chunks_out_of_order_or_a_wrong_hash_is_one_clear_error_and_nothing_half_written(parts, tmp_path) -> None:
    _, spec = parts
    swapped = lm.CatalogModel(**{**spec.__dict__, "distributions": tuple(reversed(spec.distributions))})
    for bad in (swapped, lm.CatalogModel(**{**spec.__dict__, "sha256": "0" * 64})):
        with pytest.raises(RepocompError, match="does not match its pinned hash.*pip install --force-reinstall"):
            lm.assemble(bad, tmp_path / "model.gguf")
        assert list(tmp_path.iterdir()) == [tmp_path / "site"]  # no target, no .partial


def test_a_missing_part_names_the_extra_to_install(parts, tmp_path: Path) -> None:
    _, spec = parts
    missing = lm.CatalogModel(**{**spec.__dict__, "distributions": (*spec.distributions, "fake-model-part4")})
    with pytest.raises(RepocompError, match=r"fake-model-part4 is not installed: pip install 'repocomp\[fake\]'"):
        lm.assemble(missing, tmp_path / "model.gguf")
    assert list(tmp_path.iterdir()) == [tmp_path / "site"]


def test_prepare_a_catalog_model_that_is_not_installed_leaves_nothing(tmp_path: Path, monkeypatch) -> None:
    absent = lm.CatalogModel("absent", "Absent", "tests", "absent", ("absent-model-part1",), r"/data/part\d+\.bin$",
                             1, "0" * 64)
    monkeypatch.setitem(lm.MODELS, "absent", absent)
    with pytest.raises(RepocompError, match=r"pip install 'repocomp\[absent\]'"):
        lm.prepare(None, tmp_path / "model", model="absent")
    assert not list(tmp_path.iterdir())  # no half model, no staging folder
    with pytest.raises(RepocompError, match="unknown model 'llama'.*qwen2.5-coder-0.5b"):
        lm.prepare(None, tmp_path / "model", model="llama")


def test_the_catalog_pins_the_code_models_of_the_issue_and_a_code_model_is_the_default() -> None:
    assert lm.DEFAULT_NAME == "qwen2.5-coder-0.5b"
    assert lm.MODELS["qwen2.5-coder-0.5b"].sha256.startswith("1d9614638d18") and \
        lm.MODELS["qwen2.5-coder-0.5b"].size == 491_400_064
    assert lm.MODELS["qwen2.5-coder-1.5b"].size == 1_117_320_768 and \
        len(lm.MODELS["qwen2.5-coder-1.5b"].distributions) == 22


def test_a_catalog_name_as_the_model_must_be_prepared() -> None:
    with pytest.raises(RepocompError, match="repocomp model prepare gemma-3-270m"):
        resolve_backend(Config().replace("backend", name="transformers", model="gemma-3-270m"))


def test_the_prompt_format_follows_the_model(tmp_path: Path) -> None:
    qwen, other = tmp_path / "qwen", tmp_path / "other"
    qwen.mkdir(), other.mkdir()
    tokens = ["<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|repo_name|>", "<|file_sep|>"]
    (qwen / "tokenizer.json").write_text('{"added_tokens": [' + ", ".join(f'"{t}"' for t in tokens) + "]}")
    (other / "tokenizer.json").write_text('{"added_tokens": ["<bos>", "<eos>"]}')
    backend = BackendConfig()
    assert prompt_format(PromptConfig(tokenizer=str(qwen)), "transformers", backend) == ("qwen", "files")
    assert prompt_format(PromptConfig(tokenizer=str(other)), "transformers", backend) == ("none", "comments")
    assert prompt_format(PromptConfig(), "vllm", BackendConfig(model="Qwen/Qwen2.5-Coder-7B")) == ("qwen", "files")
    assert prompt_format(PromptConfig(), "vllm", BackendConfig(model="codellama/CodeLlama-7b-hf")) == \
        ("none", "comments")
    # an explicit choice wins
    assert prompt_format(PromptConfig(tokenizer=str(qwen), fim="none"), "transformers", backend) == ("none", "files")


def test_the_readme_first_command_installs_and_prepares_what_auto_resolves_to() -> None:
    """`pip install '.[local]'` brings the default model's packages, `repocomp model prepare` (no name) prepares
    the default, and `auto` answers with the default: the README's first command gets what `auto` uses."""
    import tomllib

    root = Path(__file__).resolve().parents[1]
    first = (root / "README.md").read_text().split("```bash\n", 1)[1].splitlines()[0]
    assert "'.[local]'" in first and "repocomp model prepare &&" in first
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for name, spec in lm.MODELS.items():  # every chunk package in its model's extra, nothing else
        listed = [req for req in extras[spec.extra] if req.split("=")[0].split(">")[0] in spec.distributions]
        assert len(listed) == len(spec.distributions), name
    assert lm.MODELS[lm.DEFAULT_NAME].extra == "local"


def test_a_catalog_name_reaches_the_backend_as_its_prepared_folder(tmp_path: Path, monkeypatch) -> None:
    from repocomp.backends import make_backend, model_defaults

    folder = tmp_path / "cache" / "repocomp" / "models" / "gemma-3-270m"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(model_defaults, "prepared", lambda f=None, verify=False:
                        lm.LocalModel(folder, "gemma-3-270m", "test") if f == folder else None)
    config = resolve_backend(Config().replace("backend", name="transformers", model="gemma-3-270m", fallback=""))
    assert config.backend.model == str(folder)  # the configuration is resolved once, the backend built from it
    assert make_backend(config.backend).model_name == str(folder)


def test_a_model_prepared_without_its_gguf_gets_it_on_a_rerun_and_stays_verified(parts, tiny_model_dir: Path,
                                                                                  tmp_path: Path, monkeypatch) -> None:
    """The llamacpp backend runs the GGUF as shipped: a folder prepared before it was kept gets it, checked
    against the pinned hash, and nothing else is redone."""
    chunks, spec = parts
    monkeypatch.setitem(lm.MODELS, "fake", spec)
    out = tmp_path / "model"
    lm.prepare(tiny_model_dir, out)
    weights = (out / "model.safetensors").stat().st_mtime_ns
    assert not (out / lm.GGUF).exists()
    lm.prepare(None, out, model="fake")
    assert (out / lm.GGUF).read_bytes() == b"".join(chunks)
    assert (out / "model.safetensors").stat().st_mtime_ns == weights  # not converted again
    assert lm.prepared(out, verify=True) is not None  # the manifest covers the GGUF too
    # these chunks are no model the openvino runtime can read: said, nothing half-written, the rest kept
    assert not any(p.name.startswith("openvino") for p in out.iterdir())
    (out / lm.GGUF).write_bytes(b"damaged")
    assert lm.prepared(out) is None


def test_every_documented_extra_is_a_normalized_name_of_the_project() -> None:
    """pip before 23.3 compares a requested extra with the metadata's as written, later pips normalize both (PEP
    685): `repocomp[qwen-1.5b]` installed nothing with pip 23.2.1 because the metadata said `qwen-1-5b`. An extra
    named already normalized resolves the same under every pip; each one the docs or the catalog name is one."""
    import re
    import tomllib

    root = Path(__file__).resolve().parent.parent
    extras = set(tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    docs = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    named = {m for page in docs for m in re.findall(r"repocomp\[([^\]]+)\]", page.read_text())}
    named |= {model.extra for model in lm.MODELS.values()}
    named = {n for group in named for n in group.split(",")}
    assert {"local", "qwen-1-5b", "gemma"} <= named
    for name in named:
        assert name in extras, f"repocomp[{name}] is not an extra of pyproject.toml"
        assert name == re.sub(r"[-_.]+", "-", name).lower(), f"extra {name!r} is not in its normalized form"
