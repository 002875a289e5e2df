#!/usr/bin/env bash
# One pair of bench/textworld_credit.py's comparison: GRPO and GiGPO with turn rewards, side by
# side from one warm start, 10 iterations each, validated before training and every 5.
#
#   bash bench/textworld_credit.sh WARM OUT [SEED [KEY=VALUE ...]]
#
# WARM: a folder of examples/textworld_coins/run.py (its data/ and sft/hf_actor/), e.g. of
# `python examples/textworld_coins/run.py --out runs/tw_credit/grpo --rl trainer.total_training_steps=10`
# (the seed-42 pair's GRPO run is that command's, the GiGPO run this script's with SEED 42).
# OUT/grpo and OUT/gigpo get the two runs; SEED (default 42) is trainer.seed, which also orders
# the data; further KEY=VALUE words go to both fits (trainer.precision=32-true on a CPU without
# bf16 instructions). Then: python bench/textworld_credit.py OUT/grpo OUT/gigpo
set -euo pipefail
cd "$(dirname "$0")/.."
WARM=$1 OUT=$2 SEED=${3:-42}
shift $(( $# < 3 ? $# : 3 ))
EXTRA=("$@")
AF=.venv/bin/agentfly
if [ ! -f "$WARM/sft/hf_actor/config.json" ] || [ ! -f "$WARM/data/rl_train.jsonl" ]; then
  echo "textworld_credit.sh: $WARM has no warm start (data/rl_train.jsonl, sft/hf_actor/): run examples/textworld_coins/run.py --out $WARM first" >&2
  exit 2
fi
fit() { # $1: run folder, then extra key=value words
  local out=$1; shift
  "$AF" fit --config examples/textworld_coins/rl.yaml \
    "data.train_files=[$WARM/data/rl_train.jsonl]" "data.val_files=[$WARM/data/held_out.jsonl]" \
    "agent.init_config.model_name_or_path=$WARM/sft/hf_actor" "trainer.default_local_dir=$out" \
    trainer.total_training_steps=10 trainer.save_freq=10 "trainer.seed=$SEED" "$@" ${EXTRA[@]+"${EXTRA[@]}"}
}
mkdir -p "$OUT"
fit "$OUT/grpo" > "$OUT/grpo.log" 2>&1 &
grpo=$!
fit "$OUT/gigpo" algorithm.adv_estimator=gigpo algorithm.use_turn_rewards=true algorithm.gamma=0.95 \
  algorithm.gigpo.mode=mean_std_norm > "$OUT/gigpo.log" 2>&1 || { kill $grpo; exit 1; }
wait $grpo
echo "textworld_credit.sh: $OUT/grpo and $OUT/gigpo done (seed $SEED)"
