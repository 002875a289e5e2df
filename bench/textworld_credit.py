"""Step-level credit on the TextWorld example: GRPO against GiGPO with turn rewards, from one warm
start, side by side; the table (held-out success and reward at each validation, with the RL
minutes behind it) and the curves.

    python examples/textworld_coins/run.py --out runs/tw_credit/grpo --rl trainer.total_training_steps=10
    bash bench/textworld_credit.sh runs/tw_credit/grpo runs/tw_credit/s42 42   # its GiGPO run is the pair's
    python bench/textworld_credit.py runs/tw_credit/grpo/rl runs/tw_credit/s42/gigpo --plot docs/textworld_gigpo.png

``bench/textworld_credit.sh WARM OUT SEED`` runs both fits of a pair from a warm start (another
seed: both of its runs); add ``trainer.precision=32-true`` after the seed on a CPU without bf16
instructions, as run.py does.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from agentfly.run.report import read_metrics  # noqa: E402

METRICS = (("success rate, sampled", "val/val/success_rate"), ("success rate, greedy", "val_greedy/val/success_rate"),
           ("progress reward, sampled", "val/val/reward"))


def minutes(train: dict[int, dict[str, float]]) -> dict[int, float]:
    """RL training minutes after each iteration (validation not counted); 0 before training."""
    out, total = {0: 0.0}, 0.0
    for i in sorted(train):
        total += train[i].get("timing/iteration_s", 0.0)
        out[i] = total / 60
    return out


def compare(runs: dict[str, Path], plot: Path | None) -> str:
    data = {name: read_metrics(folder) for name, folder in runs.items()}
    points = sorted(set.intersection(*(set(val) for _, val in data.values())))
    lines = ["| held-out, 30 games | " + " | ".join(f"iteration {p}" for p in points) + " |",
             "|---|" + "---|" * len(points)]
    for name, (train, val) in data.items():
        mins = minutes(train)
        lines.append(f"| {name}: minutes of RL | " + " | ".join(f"{mins.get(p, float('nan')):.1f}" for p in points) + " |")
        for label, key in METRICS:
            lines.append(f"| {name}: {label} | " + " | ".join(f"{val[p].get(key, float('nan')):.2f}" for p in points) + " |")
    if plot is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 3, figsize=(12, 3.5))
        for name, (train, val) in data.items():
            mins = minutes(train)
            for ax, (label, key) in zip(axes[:2], METRICS[::2], strict=True):
                ax.plot([mins[p] for p in points], [val[p][key] for p in points], marker="o", label=name)
                ax.set_ylabel(f"held-out {label}")
            steps = sorted(train)
            axes[2].plot([mins[i] for i in steps], [train[i]["rollout/reward/mean"] for i in steps], label=name)
        axes[2].set_ylabel("training chains' reward")
        for ax in axes:
            ax.set_xlabel("minutes of RL training")
            ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(plot, dpi=110)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("grpo", type=Path, help="the GRPO run's folder (run.py's rl/)")
    ap.add_argument("gigpo", type=Path, help="the GiGPO run's folder")
    ap.add_argument("--plot", type=Path, default=None)
    args = ap.parse_args(argv)
    print(compare({"GRPO": args.grpo, "GiGPO + turn rewards": args.gigpo}, args.plot))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
