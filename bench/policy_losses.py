"""The policy losses on the demo task: each trained from the same warm start at several seeds,
then a table of the held-out and training accuracies (means over the seeds, each seed's
figure beside) and their curves.

    python bench/policy_losses.py run --out runs/policy_losses            # 6 losses x 3 seeds, 2 at a time
    python bench/policy_losses.py run trainer.total_training_steps=2 --out DIR --losses grpo gspo --seeds 42
    python bench/policy_losses.py report --out runs/policy_losses         # report.md and curves.png there
    python bench/policy_losses.py report --out bench/results/policy_losses --plot docs/policy_losses.png

Each run is ``agentfly fit --config conf/examples/demo_calculator.yaml`` (100 iterations,
validation on the same 100 held-out problems every 25) with ``ppo_mini_batch_size=64``: two
optimizer steps an iteration, the second on data the first has moved away from, which is where
the losses part (with the demo's single step the ratio is 1 and CISPO's and DPPO's gradients are
GRPO's). On the 2-core CPU, two side by side with a thread each, a run took about 4 minutes
(DAPO, which samples more, about 7).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from agentfly.run.report import read_metrics  # noqa: E402

A = "actor_rollout_ref.actor"
COMMON = (f"{A}.ppo_mini_batch_size=64", "trainer.logger=[csv]", "trainer.save_freq=-1")
# name: (label, the loss's own words)
LOSSES: dict[str, tuple[str, tuple[str, ...]]] = {
    "grpo": ("GRPO", ()),
    "gspo": ("GSPO", (f"{A}.policy_loss.loss_mode=gspo", f"{A}.clip_ratio_low=3e-3", f"{A}.clip_ratio_high=4e-3",
                      f"{A}.loss_agg_mode=seq-mean-token-mean")),
    "gspo_verl": ("GSPO, verl's clip", (f"{A}.policy_loss.loss_mode=gspo", f"{A}.clip_ratio_low=3e-4",
                                        f"{A}.clip_ratio_high=4e-4", f"{A}.loss_agg_mode=seq-mean-token-mean")),
    "cispo": ("CISPO", (f"{A}.policy_loss.loss_mode=cispo",)),
    "dppo_tv": ("DPPO-TV", (f"{A}.policy_loss.loss_mode=dppo_tv", f"{A}.clip_ratio_low=0.15",
                            f"{A}.clip_ratio_high=0.15", f"{A}.clip_ratio_c=10000")),
    "dapo": ("DAPO", ("algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=acc",
                      "algorithm.filter_groups.max_num_gen_batches=0", f"{A}.clip_ratio_low=0.2",
                      f"{A}.clip_ratio_high=0.28")),
}
SEEDS = (42, 1, 2)
TIMEOUT_S = 1800


def run_one(out: Path, loss: str, seed: int, threads: int, words: list[str]) -> str:
    """One run into ``out/<loss>-<seed>``; its log beside it. Returns a line saying how it ended."""
    folder = out / f"{loss}-{seed}"
    command = [sys.executable, "-m", "agentfly.cli", "fit", "--config", "conf/examples/demo_calculator.yaml",
               *COMMON, f"trainer.seed={seed}", f"trainer.default_local_dir={folder}", *LOSSES[loss][1], *words]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    start = time.monotonic()
    with (out / f"{loss}-{seed}.log").open("w") as log:
        try:
            rc = subprocess.run(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                timeout=TIMEOUT_S).returncode
        except subprocess.TimeoutExpired:
            return f"{loss}-{seed}: stopped after {TIMEOUT_S} s"
    return f"{loss}-{seed}: exit {rc} in {time.monotonic() - start:.0f} s"


def run(out: Path, losses: list[str], seeds: list[int], parallel: int, words: list[str]) -> int:
    out.mkdir(parents=True, exist_ok=True)
    threads = max(1, (os.cpu_count() or 1) // parallel)
    jobs = [(loss, seed) for seed in seeds for loss in losses]
    failed = 0
    with concurrent.futures.ThreadPoolExecutor(parallel) as pool:
        for line in pool.map(lambda job: run_one(out, *job, threads, words), jobs):
            print(line, flush=True)
            failed += "exit 0 " not in line
    return 1 if failed else 0


def curves(folder: Path) -> tuple[dict[int, float], dict[int, float], dict[int, float]]:
    """A run's held-out accuracy (sampled, greedy) by iteration and its training chains' accuracy."""
    train, val = read_metrics(folder)
    sampled = {i: v["val/val/accuracy"] for i, v in val.items() if "val/val/accuracy" in v}
    greedy = {i: v["val_greedy/val/accuracy"] for i, v in val.items() if "val_greedy/val/accuracy" in v}
    chains = {i: v["rollout/accuracy"] for i, v in train.items() if "rollout/accuracy" in v}
    return sampled, greedy, chains


def report(out: Path, plot: Path | None = None) -> str:
    """The table (also written to ``out/report.md``) and the curves (``plot``, else ``out/curves.png``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (held, chains_ax) = plt.subplots(1, 2, figsize=(11, 3.8))
    rows = []
    for loss, (label, _) in LOSSES.items():
        runs = {s: curves(out / f"{loss}-{s}") for s in SEEDS if (out / f"{loss}-{s}" / "metrics").is_dir()}
        if not runs:
            continue
        points = sorted(set.intersection(*(set(r[0]) for r in runs.values())))
        mean = [sum(r[0][p] for r in runs.values()) / len(runs) for p in points]
        line, = held.plot(points, mean, marker="o", label=f"{label} ({len(runs)} seeds)")
        for r in runs.values():
            held.plot(list(r[0]), list(r[0].values()), color=line.get_color(), alpha=0.25, lw=0.8)
        last = max(points)
        window = [sorted(r[2])[-20:] for r in runs.values()]
        train20 = [sum(r[2][i] for i in w) / len(w) for r, w in zip(runs.values(), window, strict=True)]
        steps = sorted(set.intersection(*(set(r[2]) for r in runs.values())))
        smooth = [sum(r[2][i] for r in runs.values()) / len(runs) for i in steps]
        k = 10
        chains_ax.plot(steps[k - 1:], [sum(smooth[j - k + 1:j + 1]) / k for j in range(k - 1, len(smooth))],
                       color=line.get_color(), label=label)

        def cell(values: list[float]) -> str:
            return f"{sum(values) / len(values):.3f} ({', '.join(f'{v:.2f}' for v in values)})"

        second_half = [p for p in points if p >= last // 2]
        rows.append((label, len(runs), {p: cell([r[0][p] for r in runs.values()]) for p in points},
                     cell([r[1][last] for r in runs.values() if last in r[1]]),
                     cell([sum(r[0][p] for p in second_half) / len(second_half) for r in runs.values()]),
                     cell(train20)))
    held.set_xlabel("iteration")
    held.set_ylabel("held-out accuracy, sampled")
    held.legend(fontsize=7)
    chains_ax.set_xlabel("iteration")
    chains_ax.set_ylabel("training chains' accuracy (10-iteration mean)")
    fig.tight_layout()
    fig.savefig(plot or out / "curves.png", dpi=110)
    points = sorted({p for row in rows for p in row[2]})
    lines = ["| loss | seeds | " + " | ".join(f"held-out, iteration {p}" for p in points)
             + " | held-out, greedy, last | held-out, mean of the second half | training chains, last 20 |",
             "|---|---|" + "---|" * (len(points) + 3)]
    for label, n, by_point, greedy, second_half, train20 in rows:
        lines.append(f"| {label} | {n} | " + " | ".join(by_point.get(p, "-") for p in points)
                     + f" | {greedy} | {second_half} | {train20} |")
    text = "\n".join(lines) + "\n\nEach cell: the mean over the seeds, then each seed's figure (seeds "\
        + ", ".join(map(str, SEEDS)) + ").\n"
    (out / "report.md").write_text(text)
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("run", "report"))
    ap.add_argument("words", nargs="*", help="key=value words for every run")
    ap.add_argument("--out", type=Path, default=REPO / "runs" / "policy_losses")
    ap.add_argument("--losses", nargs="*", default=list(LOSSES), choices=list(LOSSES))
    ap.add_argument("--seeds", nargs="*", type=int, default=list(SEEDS))
    ap.add_argument("--parallel", type=int, default=2, help="runs side by side")
    ap.add_argument("--plot", type=Path, default=None, help="report: where the curves go (default: OUT/curves.png)")
    args = ap.parse_args(argv)
    if args.what == "run":
        return run(args.out, args.losses, args.seeds, args.parallel, args.words)
    print(report(args.out, args.plot))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
