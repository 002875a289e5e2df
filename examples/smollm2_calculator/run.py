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

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))
from agentfly.report import read_metrics  # noqa: E402

METRICS = (  # (name in the table, metric under val/ and val_greedy/)
    ("tool-call rate", "tool_call_rate"),
    ("format errors", "format_error_rate"),
    ("accuracy", "accuracy"),
    ("reward", "reward"),
)


def agentfly(*words: str) -> None:
    command = [sys.executable, "-m", "agentfly.cli", *words]  # also where agentfly is on PYTHONPATH only
    print("+", " ".join(command), flush=True)
    subprocess.run(command, cwd=REPO, check=True)


def run(out: Path, extra: list[str], sft_extra: list[str], rl_extra: list[str], held_out: int) -> dict[str, float]:
    """The stages, each timed; returns their seconds. ``held_out``: how many of the 100 held-out
    problems the evaluations use (the first ones; a short run uses a few)."""
    from agentfly.models.smollm2 import prepare_smollm2

    base = prepare_smollm2()
    seconds: dict[str, float] = {}
    for stage in ("base", "sft", "rl"):
        shutil.rmtree(out / stage, ignore_errors=True)
    subprocess.run([sys.executable, str(HERE / "make_data.py"), "--out", str(out / "data")], check=True)
    questions = (out / "data" / "held_out.jsonl").read_text().splitlines(keepends=True)
    (out / "data" / "held_out.jsonl").write_text("".join(questions[:held_out]))
    data = [f"data.train_files=[{out}/data/rl_train.jsonl]", f"data.val_files=[{out}/data/held_out.jsonl]"]
    start = time.monotonic()
    agentfly("validate", "--config", str(HERE / "rl.yaml"), *data, *extra,
             f"agent.init_config.model_name_or_path={base}", f"trainer.default_local_dir={out}/base")
    seconds["base evaluation"] = time.monotonic() - start
    start = time.monotonic()
    agentfly("sft", "--config", str(HERE / "sft.yaml"), f"actor_rollout_ref.model.path={base}",
             f"data.train_files=[{out}/data/sft_train.jsonl]", f"data.val_files=[{out}/data/sft_val.jsonl]",
             f"trainer.default_local_dir={out}/sft", *extra, *sft_extra)
    seconds["sft"] = time.monotonic() - start
    start = time.monotonic()
    agentfly("fit", "--config", str(HERE / "rl.yaml"), *data, f"trainer.default_local_dir={out}/rl",
             f"agent.init_config.model_name_or_path={out}/sft/hf_actor", *extra, *rl_extra)
    seconds["rl"] = time.monotonic() - start
    return seconds


def held_out(out: Path) -> list[tuple[str, dict[str, float]]]:
    """The held-out metrics at each point: the base model, after SFT (the RL run's validation
    before training), and at each later validation of the RL run."""
    points = []
    _, base = read_metrics(out / "base")
    if base:
        points.append(("base model", next(iter(base.values()))))
    _, val = read_metrics(out / "rl")
    for iteration, values in sorted(val.items()):
        points.append(("after SFT" if iteration == 0 else f"RL iteration {iteration}", values))
    return points


def table(points: list[tuple[str, dict[str, float]]], problems: int) -> str:
    head = f"| held-out, {problems} problems | " + " | ".join(name for name, _ in points) + " |"
    lines = [head, "|---" * (len(points) + 1) + "|"]
    for label, metric in METRICS:
        for kind, prefix in (("sampled", "val/val/"), ("greedy", "val_greedy/val/")):
            cells = []
            for _, values in points:
                v = values.get(prefix + metric)
                cells.append("-" if v is None else f"{v:.2f}")
            lines.append(f"| {label}, {kind} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(out: Path, points: list[tuple[str, dict[str, float]]]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sft_train, sft_val = read_metrics(out / "sft")
    rl_train, rl_val = read_metrics(out / "rl")
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    ax = axes[0]
    ax.plot(sorted(sft_train), [sft_train[k].get("train/loss") for k in sorted(sft_train)], label="train")
    ax.plot(sorted(sft_val), [sft_val[k].get("val/loss") for k in sorted(sft_val)], "o-", label="validation")
    ax.set(title="SFT: loss on the assistant's tokens", xlabel="step")
    ax.legend()
    ax = axes[1]
    ax.plot(sorted(rl_train), [rl_train[k].get("training/reward/mean") for k in sorted(rl_train)])
    ax.set(title="RL: reward of the training chains", xlabel="iteration")
    ax = axes[2]
    xs = sorted(rl_val)
    for prefix, style in (("val/val/", "o-"), ("val_greedy/val/", "s--")):
        ax.plot(xs, [rl_val[k].get(prefix + "accuracy") for k in xs], style, label=prefix.split("/")[0])
    base = points[0][1] if points and points[0][0] == "base model" else {}
    if base:
        ax.axhline(base.get("val/val/accuracy", 0.0), color="grey", lw=0.8, label="base model")
    ax.set(title="held-out accuracy (RL iteration 0 = after SFT)", xlabel="iteration", ylim=(0, 1))
    ax.legend()
    fig.tight_layout()
    path = out / "curves.png"
    fig.savefig(path, dpi=100)
    return path


def report(out: Path, seconds: dict[str, float] | None = None) -> str:
    points = held_out(out)
    problems = len((out / "data" / "held_out.jsonl").read_text().splitlines())
    text = ["# SmolLM2-135M-Instruct learns the calculator", "", table(points, problems), ""]
    if seconds:
        text += ["Seconds: " + ", ".join(f"{k} {v:.0f}" for k, v in seconds.items()), ""]
    if (out / "sft").exists() and (out / "rl").exists():
        text += [f"![curves]({plot(out, points).name})", ""]
    body = "\n".join(text)
    (out / "report.md").write_text(body)
    return body


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(REPO / "runs" / "smollm2_calculator"))
    ap.add_argument("--report", action="store_true", help="only the tables and plot of the runs there")
    ap.add_argument("--held-out", type=int, default=100, help="evaluate on the first N held-out problems")
    ap.add_argument("--sft", nargs="*", default=[], help="key=value words for agentfly sft only")
    ap.add_argument("--rl", nargs="*", default=[], help="key=value words for agentfly fit only")
    args, extra = ap.parse_known_args(argv)
    out = Path(args.out).resolve()
    seconds = None if args.report else run(out, extra, args.sft, args.rl, args.held_out)
    print(report(out, seconds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
