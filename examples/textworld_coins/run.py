"""The TextWorld example, one command: SmolLM2-135M-Instruct is taught to play TextWorld's
coin-collector games (follow the route each game's goal gives, then take the coin), on a CPU.

    python examples/textworld_coins/run.py            # make demo-textworld runs this
    python examples/textworld_coins/run.py --report   # the tables and plot of the runs there

1. ``make_data.py``: games generated offline; the walkthroughs of short routes (one to three
   moves) as chats; RL games and held-out games of two to four moves, on seeds of their own.
2. The base model on the held-out games (``agentfly validate``).
3. ``agentfly sft`` (``sft.yaml``, 5 steps): the ``action`` agent's format and a first idea of the moves.
4. ``agentfly fit`` (``rl.yaml``): GRPO on the longer routes with ``textworld_step`` and
   ``textworld_progress_reward`` (1 for a game won, else half the share of the walkthrough
   played), validated on the held-out games before training and every 5 iterations.
5. The tables (success rate, chains with an action, format errors, turns, sampled and greedy,
   before and after each stage) and the curves, in ``runs/textworld_coins/``: ``report.md`` and ``curves.png``.

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
    title="SmolLM2-135M-Instruct on TextWorld's coin-collector games",
    items="games",
    metrics=(("success rate", "success_rate"), ("chains with an action", "tool_call_rate"),
             ("format errors", "format_error_rate"), ("turns", "turns/mean")),
    headline=("success_rate", "success rate"),
)

if __name__ == "__main__":
    raise SystemExit(main(EXAMPLE, description=__doc__.split("\n\n")[0]))
