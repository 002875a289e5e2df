"""Validation accuracy of the demo trained in each ``trainer.rollout_mode``, side by side.

    python scripts/compare_rollout_modes.py sync=runs/sync one_step_off=runs/1off async2=runs/a2 \
        --plot docs/rollout_modes.png

Each argument is ``label=run_dir`` (a ``agentfly fit`` run directory). Prints a Markdown table of
the sampled and greedy validation accuracy at every validation, and the training seconds per
iteration; ``--plot`` draws the sampled accuracy over iterations, one line per run.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

SAMPLED, GREEDY = "val/val/accuracy", "val_greedy/val/accuracy"


def read_run(run_dir: Path) -> tuple[dict[int, dict[str, float]], list[float]]:
    """Validation metrics per iteration and the seconds of every training iteration."""
    vals: dict[int, dict[str, float]] = {}
    seconds: list[float] = []
    iteration = 0
    for path in sorted((run_dir / "metrics").glob("version_*/metrics.csv")):
        for row in csv.DictReader(path.open()):
            if row.get("training/iteration"):
                iteration = int(float(row["training/iteration"]))
                if row.get("timing/iteration_s"):
                    seconds.append(float(row["timing/iteration_s"]))
            if row.get(SAMPLED):
                vals[iteration] = {k: float(row[k]) for k in (SAMPLED, GREEDY) if row.get(k)}
    return vals, seconds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="+", help="label=run_dir")
    ap.add_argument("--plot", default=None)
    args = ap.parse_args()
    runs = {}
    for spec in args.runs:
        label, _, path = spec.partition("=")
        runs[label] = read_run(Path(path))
    iterations = sorted({k for vals, _ in runs.values() for k in vals})
    print("| iteration | " + " | ".join(f"{label} sampled / greedy" for label in runs) + " |")
    print("|---|" + "---|" * len(runs))
    for k in iterations:
        cells = []
        for vals, _ in runs.values():
            v = vals.get(k, {})
            cells.append(f"{v.get(SAMPLED, float('nan')):.2f} / {v.get(GREEDY, float('nan')):.2f}")
        print(f"| {k} | " + " | ".join(cells) + " |")
    for label, (_, seconds) in runs.items():
        if seconds:
            seconds = sorted(seconds)
            print(f"{label}: median {seconds[len(seconds) // 2]:.2f} s per training iteration")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 3.5))
        for label, (vals, _) in runs.items():
            ks = sorted(vals)
            ax.plot(ks, [vals[k].get(SAMPLED) for k in ks], marker="o", label=label)
        ax.set_xlabel("iteration")
        ax.set_ylabel("validation accuracy (sampled, T=1)")
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)


if __name__ == "__main__":
    main()
