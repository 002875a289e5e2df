#!/usr/bin/env bash
# Train an agent program that speaks only OpenAI's API (calculator_agent.py) with `agentfly fit`,
# then serve the trained actor with `agentfly serve` and evaluate it with the same program.
#
#   bash examples/harness/run.sh            # RUN=runs/harness STEPS=100 HARNESS=function
#
# HARNESS=function runs the program's `solve` in the rollout's event loop (fast); HARNESS=command
# runs `python calculator_agent.py` once per chain (the same program as a process: about a second
# of Python start-up and imports per chain on a 2-core CPU). Greedy held-out accuracy of the warm
# start and of the trained actor, each read through `agentfly serve`, ends the run.
set -euo pipefail
cd "$(dirname "$0")/../.."
RUN=${RUN:-runs/harness}
STEPS=${STEPS:-100}
HARNESS=${HARNESS:-function}
PY=${PY:-.venv/bin/python}
AGENTFLY=${AGENTFLY:-.venv/bin/agentfly}
PROGRAM=examples/harness/calculator_agent.py

if [ "$HARNESS" = command ]; then
  harness="agent.harness.command='$PY $PROGRAM'"
else
  harness="agent.harness.function=$PROGRAM:solve"
fi
"$AGENTFLY" fit --config conf/examples/demo_calculator.yaml agent.init_config.tools=[] "$harness" \
  trainer.total_training_steps="$STEPS" trainer.default_local_dir="$RUN"

evaluate() {  # $1: model folder; prints the program's greedy accuracy on the validation rows
  local log; log=$(mktemp)
  "$AGENTFLY" serve --config conf/examples/demo_calculator.yaml --port 0 actor_rollout_ref.model.path="$1" > "$log" 2>&1 &
  local server=$!
  for _ in $(seq 120); do grep -q "agentfly serve: http" "$log" && break; sleep 1; done
  local url; url=$(grep -o "http://[^ ]*/v1" "$log" | head -1)
  [ -n "$url" ] || { cat "$log"; kill "$server"; exit 1; }
  "$PY" "$PROGRAM" --eval agentfly/demo/data/val.json --base-url "$url"
  kill -TERM "$server"; wait "$server" || true
  rm -f "$log"
}
echo "warm start:    $(evaluate agentfly/demo/model)"
echo "trained actor: $(evaluate "$RUN/hf_actor")"
