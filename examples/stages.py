"""The staged examples' driver: data, the base model's evaluation, ``agentfly sft``,
``agentfly fit``, then a report (tables and curves) comparing the held-out metrics at each point.

An example is a folder holding ``make_data.py`` (``--out DIR`` writes ``sft_train.jsonl``,
``sft_val.jsonl``, ``rl_train.jsonl`` and ``held_out.jsonl``), ``sft.yaml`` and ``rl.yaml``; its
``run.py`` calls :func:`main` with an :class:`Example` naming what to show. Extra ``key=value``
words go to both training commands (``trainer.total_training_steps=2``...).
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from agentfly.run.report import read_metrics  # noqa: E402


@dataclasses.dataclass(frozen=True)
class Example:
    """What an example shows.

    Attributes:
        folder: the example's folder (``make_data.py``, ``sft.yaml``, ``rl.yaml``).
        title: the report's heading.
        items: what a held-out row is, plural ("problems", "games").
        metrics: the table's rows: (name, metric under ``val/<source>/`` and ``val_greedy/<source>/``).
        headline: the metric of the curves' held-out panel, and its name there.
        base_model: makes the base model in the run's folder and returns its path; None:
            SmolLM2-135M-Instruct (:func:`agentfly.models.smollm2.prepare_smollm2`).
    """

    folder: Path
    title: str
    items: str
    metrics: tuple[tuple[str, str], ...]
    headline: tuple[str, str]
    base_model: Callable[[Path], Path] | None = None

    @property
    def out(self) -> Path:
        return REPO / "runs" / self.folder.name


def agentfly(*words: str) -> None:
    command = [sys.executable, "-m", "agentfly.cli", *words]  # also where agentfly is on PYTHONPATH only
    print("+", " ".join(command), flush=True)
    subprocess.run(command, cwd=REPO, check=True)


def machine_precision() -> list[str]:
    """``trainer.precision=32-true`` where the configs' bf16 would be emulated (a CPU without bf16
    instructions, about 25x slower: :func:`agentfly.modules.trainer.cpu_bf16_is_native`), else
    nothing. It goes before the user's words, which may set another."""
    import torch

    from agentfly.modules.trainer import cpu_bf16_is_native

    if torch.cuda.is_available() or cpu_bf16_is_native():
        return []
    print("this CPU has no bf16 instructions: the stages train in fp32 (trainer.precision=32-true)", flush=True)
    return ["trainer.precision=32-true"]


def run(example: Example, out: Path, extra: list[str], sft_extra: list[str], rl_extra: list[str],
        held_out: int | None, data_options: Sequence[str] = ()) -> dict[str, float]:
    """The stages, each timed; returns their seconds. ``held_out``: how many of the held-out rows
    the evaluations use (the first ones; a short run uses a few; None: all); ``data_options``:
    options of ``make_data.py``."""
    from agentfly.models.smollm2 import prepare_smollm2

    here = example.folder
    base = example.base_model(out) if example.base_model else prepare_smollm2()
    extra = [*machine_precision(), *extra]
    seconds: dict[str, float] = {}
    for stage in ("base", "sft", "rl"):
        shutil.rmtree(out / stage, ignore_errors=True)
    start = time.monotonic()
    subprocess.run([sys.executable, str(here / "make_data.py"), "--out", str(out / "data"), *data_options], check=True)
    seconds["data"] = time.monotonic() - start
    if held_out is not None:
        rows = (out / "data" / "held_out.jsonl").read_text().splitlines(keepends=True)
        (out / "data" / "held_out.jsonl").write_text("".join(rows[:held_out]))
    data = [f"data.train_files=[{out}/data/rl_train.jsonl]", f"data.val_files=[{out}/data/held_out.jsonl]"]
    start = time.monotonic()
    agentfly("validate", "--config", str(here / "rl.yaml"), *data, *extra, *rl_extra,
             f"agent.init_config.model_name_or_path={base}", f"trainer.default_local_dir={out}/base")
    seconds["base evaluation"] = time.monotonic() - start
    start = time.monotonic()
    agentfly("sft", "--config", str(here / "sft.yaml"), f"actor_rollout_ref.model.path={base}",
             f"data.train_files=[{out}/data/sft_train.jsonl]", f"data.val_files=[{out}/data/sft_val.jsonl]",
             f"trainer.default_local_dir={out}/sft", *extra, *sft_extra)
    seconds["sft"] = time.monotonic() - start
    start = time.monotonic()
    agentfly("fit", "--config", str(here / "rl.yaml"), *data, f"trainer.default_local_dir={out}/rl",
             f"agent.init_config.model_name_or_path={out}/sft/hf_actor", *extra, *rl_extra)
    seconds["rl"] = time.monotonic() - start
    return seconds


def held_out_points(out: Path) -> list[tuple[str, dict[str, float]]]:
    """The held-out metrics at each point: the base model, after SFT (the RL run's validation
    before training), and at each later validation of the RL run."""
    points = []
    _, base = read_metrics(out / "base")
    if base:
        points.append(("base model", next(iter(base.values()))))
    _, val = read_metrics(out / "rl")
    for iteration, values in sorted(val.items()):
        points.append((_point_name(iteration), values))
    return points


def _point_name(iteration: int) -> str:
    """The table's name of the RL run's validation after ``iteration`` iterations."""
    return "after SFT" if iteration == 0 else f"RL iteration {iteration}"


def table(example: Example, points: list[tuple[str, dict[str, float]]], rows: int,
          rl_minutes: dict[str, float] | None = None) -> str:
    """The held-out metrics at each point; ``rl_minutes``: the RL training minutes (validation
    not counted) behind the points it names, a first row."""
    head = f"| held-out, {rows} {example.items} | " + " | ".join(name for name, _ in points) + " |"
    lines = [head, "|---" * (len(points) + 1) + "|"]
    if rl_minutes:
        cells = [f"{rl_minutes[name]:.1f}" if name in rl_minutes else "-" for name, _ in points]
        lines.append("| minutes of RL training | " + " | ".join(cells) + " |")
    for label, metric in example.metrics:
        for kind, prefix in (("sampled", "val/val/"), ("greedy", "val_greedy/val/")):
            cells = []
            for _, values in points:
                v = values.get(prefix + metric)
                cells.append("-" if v is None else f"{v:.2f}")
            lines.append(f"| {label}, {kind} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def rl_minutes(out: Path) -> dict[str, float]:
    """The RL training minutes (the iterations' ``timing/iteration_s``, validation not counted)
    before each of the RL run's validations, by the table's point name."""
    train, val = read_metrics(out / "rl")
    minutes = {}
    for iteration in val:
        seconds = sum(v.get("timing/iteration_s", 0.0) for i, v in train.items() if i <= iteration)
        minutes[_point_name(iteration)] = seconds / 60
    return minutes


def rl_seconds(out: Path) -> dict[str, float]:
    """The RL run's training time (rollouts and updates: the iterations' ``timing/iteration_s``)
    and its iterations; validation is not in it."""
    train, _ = read_metrics(out / "rl")
    times = [v["timing/iteration_s"] for v in train.values() if "timing/iteration_s" in v]
    return {"iterations": float(len(times)), "training_s": sum(times)}


def plot(example: Example, out: Path, points: list[tuple[str, dict[str, float]]]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metric, name = example.headline
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
        ax.plot(xs, [rl_val[k].get(prefix + metric) for k in xs], style, label=prefix.split("/")[0])
    base = points[0][1] if points and points[0][0] == "base model" else {}
    if base:
        ax.axhline(base.get("val/val/" + metric, 0.0), color="grey", lw=0.8, label="base model")
    ax.set(title=f"held-out {name} (RL iteration 0 = after SFT)", xlabel="iteration", ylim=(0, 1))
    ax.legend()
    fig.tight_layout()
    path = out / "curves.png"
    fig.savefig(path, dpi=100)
    return path


def report(example: Example, out: Path, seconds: dict[str, float] | None = None) -> str:
    points = held_out_points(out)
    rows = len((out / "data" / "held_out.jsonl").read_text().splitlines())
    minutes = rl_minutes(out) if (out / "rl").exists() else None
    text = [f"# {example.title}", "", table(example, points, rows, minutes), ""]
    if seconds:
        text += ["Seconds: " + ", ".join(f"{k} {v:.0f}" for k, v in seconds.items()), ""]
    if (out / "rl").exists():
        rl = rl_seconds(out)
        text += [f"RL training (rollouts and updates, validation not counted): {rl['iterations']:.0f} "
                 f"iterations in {rl['training_s']:.0f} s", ""]
    if (out / "sft").exists() and (out / "rl").exists():
        text += [f"![curves]({plot(example, out, points).name})", ""]
    body = "\n".join(text)
    (out / "report.md").write_text(body)
    return body


def main(example: Example, argv: list[str] | None = None, description: str = "") -> int:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--out", default=str(example.out))
    ap.add_argument("--report", action="store_true", help="only the tables and plot of the runs there")
    ap.add_argument("--held-out", type=int, default=None, help=f"evaluate on the first N held-out {example.items}")
    ap.add_argument("--data-option", action="append", default=[],
                    help="an option of the example's make_data.py, written --data-option=--games=2")
    ap.add_argument("--sft", nargs="*", default=[], help="key=value words for agentfly sft only")
    ap.add_argument("--rl", nargs="*", default=[], help="key=value words for agentfly fit (and the base model's evaluation, also rl.yaml's)")
    args, extra = ap.parse_known_args(argv)
    out = Path(args.out).resolve()
    seconds = None if args.report else run(example, out, extra, args.sft, args.rl, args.held_out, args.data_option)
    print(report(example, out, seconds))
    return 0
