"""The SmolLM2 example, one command: SmolLM2-135M-Instruct learns to use a calculator, then to
use it well, on a CPU.

    python examples/smollm2_calculator/run.py            # make demo-smollm2 runs this
    python examples/smollm2_calculator/run.py --report   # the tables and plot of the runs there

1. ``make_data.py``: tool-use traces of three problem structures, RL questions of seven, and
   100 held-out questions of the seven.
2. The base model on the held-out questions (``agentfly validate``): it never calls a tool.
3. ``agentfly sft`` (``sft.yaml``): the call format, from the traces.
4. ``agentfly fit`` (``rl.yaml``): GRPO with the calculator on all seven structures, validated on
   the held-out questions before training and every 20 iterations.
5. The tables (tool-call rate, format errors, sampled and greedy accuracy on the held-out
   questions, before and after each stage) and the curves, in ``runs/smollm2_calculator/``:
   ``report.md`` and ``curves.png``.

Extra ``key=value`` words go to both training commands (``trainer.total_training_steps=2``...).
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from stages import Example, main  # noqa: E402

EXAMPLE = Example(
    folder=HERE,
    title="SmolLM2-135M-Instruct learns the calculator",
    items="problems",
    metrics=(("tool-call rate", "tool_call_rate"), ("format errors", "format_error_rate"),
             ("accuracy", "accuracy"), ("reward", "reward")),
    headline=("accuracy", "accuracy"),
)

if __name__ == "__main__":
    raise SystemExit(main(EXAMPLE, description=__doc__.split("\n\n")[0]))
