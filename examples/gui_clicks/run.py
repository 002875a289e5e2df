"""The vision example, one command: a tiny Qwen2.5-VL learns to click the shape a goal names on
a screenshot, on a CPU.

    python examples/gui_clicks/run.py            # make demo-gui runs this
    python examples/gui_clicks/run.py --report   # the tables and plot of the runs there

1. The model: a tiny Qwen2.5-VL built here from a config (random weights, the tiny tokenizer and
   Qwen's image processor on Pillow: :func:`agentfly.models.tiny_vl.build_tiny_vl_model`).
2. ``make_data.py``: screens of the ``gui`` environment's ``locate`` task (one shape on a 112 x 112
   screen, in one of eight cells), demonstrations as chats, RL screens and held-out screens.
3. The base model on the held-out screens (``agentfly validate``).
4. ``agentfly sft`` (``sft.yaml``, 225 steps): the ``gui`` agent's answer, ``Action: click(...)``, and a
   first reading of where the shape is.
5. ``agentfly fit`` (``rl.yaml``): GRPO, each click played by ``gui_step`` and scored by
   ``gui_point_reward`` (1 on the shape, else a Gaussian of the distance); validated on the
   held-out screens before training and every 10 iterations.
6. The tables (click accuracy, chains with an action, sampled and greedy, before and after each
   stage) and the curves, in ``runs/gui_clicks/``: ``report.md`` and ``curves.png``.

Extra ``key=value`` words go to both training commands (``trainer.total_training_steps=2``...).
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from stages import Example, main  # noqa: E402

#: the tiny model's shape. A wider initialisation than Qwen's 0.02 and a rotary base of 10: with
#: 0.02 the model stayed at chance (1/8) for 1,500 supervised steps; with 0.2 it finds the
#: shape's cell in 250-300 (bench/README.md, "The vision example").
MODEL = dict(initializer_range=0.2, rope_theta=10.0)


def tiny_vl(out: Path) -> Path:
    from agentfly.models.tiny_vl import build_tiny_vl_model

    return build_tiny_vl_model(out / "model", **MODEL)


EXAMPLE = Example(
    folder=HERE,
    title="A tiny Qwen2.5-VL clicking on the gui environment's screens",
    items="screens",
    metrics=(("click accuracy", "accuracy"), ("chains with an action", "tool_call_rate")),
    headline=("accuracy", "click accuracy"),
    base_model=tiny_vl,
)

if __name__ == "__main__":
    raise SystemExit(main(EXAMPLE, description=__doc__.split("\n\n")[0]))
