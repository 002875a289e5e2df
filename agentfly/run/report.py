"""The end-of-run report: validation before → after, time taken, sample trajectories, a plot.

Reads only files in the run directory, so it works on a finished, resumed or copied run:

- ``metrics/version_*/metrics.csv`` (read in version order; a resumed fit continues the newest). Training rows
  carry ``training/iteration``; a validation row (``val/...``, ``val_greedy/...``) belongs to the
  last iteration logged before it (0 for validation before training).
- ``trajectories/val_trajectories_iterNNNNNN.jsonl`` (and ``val_greedy_...``): sample chains.

Writes ``training_curves.png`` (reward, accuracy, KL, entropy over iterations) and ``report.md``
(table and samples) into the run directory. Whatever is missing (no validation, no KL term, a
single validation, matplotlib absent) is named in the report instead of failing.
"""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path
from typing import Any

PLOT_NAME = "training_curves.png"
REPORT_NAME = "report.md"
VAL_PREFIXES = ("val/", "val_greedy/")
TABLE_METRICS = ("reward", "accuracy", "tool_call_rate")
KL_KEYS = ("actor/kl_loss", "actor/kl_to_ref")  # KL to the reference; the first present is plotted
NUM_SAMPLES = 3


# ---------------------------------------------------------------------------------- reading


def metric_number(text: str | None) -> float | None:
    """A CSV cell as a finite number; None for a blank, a non-number or an infinity."""
    try:
        value = float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def version_number(path: Path) -> int:
    """The N of a ``version_N/metrics.csv`` (-1 for another folder's)."""
    match = re.search(r"version_(\d+)$", path.parent.name)
    return int(match.group(1)) if match else -1


def metrics_files(metrics_dir: Path) -> list[Path]:
    """``metrics_dir/version_*/metrics.csv`` in version order (``version_10`` after ``version_2``)."""
    return sorted(metrics_dir.glob("version_*/metrics.csv"), key=version_number)


def read_metrics(run_dir: Path) -> tuple[dict[int, dict[str, float]], dict[int, dict[str, float]]]:
    """(training metrics by iteration, validation metrics by iteration) over every launch.

    A resumed launch that repeats an iteration overrides the earlier row (what the run kept).
    """
    train: dict[int, dict[str, float]] = {}
    val: dict[int, dict[str, float]] = {}
    iteration = 0
    for path in metrics_files(run_dir / "metrics"):
        with path.open(newline="", encoding="utf-8") as f:
            for row in csv.DictReader(f):
                values = {
                    k: v for k, v in ((k, metric_number(x)) for k, x in row.items() if k) if v is not None
                }
                if "training/iteration" in values:
                    iteration = int(values["training/iteration"])
                    train.setdefault(iteration, {}).update(values)
                vals = {k: v for k, v in values.items() if k.startswith(VAL_PREFIXES)}
                if vals:
                    val.setdefault(iteration, {}).update(vals)
    return train, val


def launch_timing(run_dir: Path) -> dict[str, Any]:
    """The launches that trained, and the newest launch's own training (the launch that ends with
    this report: ``elapsed_s`` is its time). A launch is a metrics file, or within one a value of
    its ``launch`` column (a resumed fit continues the run's file, :mod:`agentfly.run.metrics_file`).

    Returns:
        ``launches`` (launches with training rows), ``launch_iterations`` and
        ``launch_training_s`` (the newest launch's iterations and the sum of their
        ``timing/iteration_s``; None without timings).
    """
    launches: dict[tuple[int, str], list[dict[str, str]]] = {}
    for n, path in enumerate(metrics_files(run_dir / "metrics")):
        with path.open(newline="", encoding="utf-8") as f:
            for r in csv.DictReader(f):
                if metric_number(r.get("training/iteration")) is not None:
                    launches.setdefault((n, r.get("launch") or "1"), []).append(r)
    rows = list(launches.values())[-1] if launches else []
    times = [t for t in (metric_number(r.get("timing/iteration_s")) for r in rows) if t is not None]
    return {"launches": len(launches), "launch_iterations": len(rows), "launch_training_s": sum(times) if times else None}


def _val_files(run_dir: Path, kind: str) -> dict[int, Path]:
    pattern = re.compile(rf"^{kind}_trajectories_iter(\d+)\.jsonl$")
    out = {}
    for path in (run_dir / "trajectories").glob(f"{kind}_trajectories_iter*.jsonl"):
        match = pattern.match(path.name)
        if match:
            out[int(match.group(1))] = path
    return out


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut short by a killed run
    return records


# ---------------------------------------------------------------------------------- figures


def _sources(val: dict[int, dict[str, float]]) -> list[str]:
    """Data sources seen in validation metrics (``val/<source>/<metric>``), in first-seen order."""
    seen: dict[str, None] = {}
    for metrics in val.values():
        for key in metrics:
            parts = key.split("/")
            if len(parts) >= 3:
                seen.setdefault(parts[1], None)
    return list(seen)


def comparison(
    val: dict[int, dict[str, float]],
) -> tuple[list[dict[str, Any]], int | None, int | None]:
    """Table rows and the two iterations compared.

    A row: ``source``, ``metric``, and ``val`` (the validation as ``val_kwargs`` configure it) and
    ``val_greedy`` (the greedy pass beside a sampled one), each a (before, after) pair.
    """
    if not val:
        return [], None, None
    first, last = min(val), max(val)
    rows = []
    for source in _sources(val):
        for metric in TABLE_METRICS:
            row: dict[str, Any] = {"source": source, "metric": metric}
            for prefix in ("val", "val_greedy"):
                key = f"{prefix}/{source}/{metric}"
                row[prefix] = (val[first].get(key), val[last].get(key))
            if any(v is not None for pair in (row["val"], row["val_greedy"]) for v in pair):
                rows.append(row)
    return rows, first, last


def timing(train: dict[int, dict[str, float]]) -> dict[str, float | int | None]:
    """Iterations run and the training time (sum of ``timing/iteration_s``, validation excluded)."""
    seconds = [m["timing/iteration_s"] for m in train.values() if "timing/iteration_s" in m]
    total = sum(seconds) if seconds else None
    return {
        "iterations": max(train) if train else 0,
        "training_s": total,
        "s_per_iteration": total / len(seconds) if seconds else None,
    }


def failures(train: dict[int, dict[str, float]]) -> dict[str, Any]:
    """The run's failures, summed over its iterations, under the names of the metrics CSV:
    ``chains`` (chain runs failed by cause, ``rollout/failed_chains/<cause>``; a re-run that fails
    again counts again), ``resampled`` and ``dropped_groups``/``dropped_chains``; ``tool_errors``
    (tool calls that returned an error by kind, ``rollout/failures/tool_kinds/<kind>``, the
    model's own among them); ``no_signal_iterations`` (iterations whose groups all scored
    alike)."""
    def total(key: str) -> float:
        return sum(m.get(key, 0.0) for m in train.values())

    def kinds(prefix: str) -> dict[str, int]:
        names = sorted({k[len(prefix):] for m in train.values() for k in m if k.startswith(prefix)})
        return {n: int(c) for n in names if (c := total(prefix + n))}

    return {
        "chains": kinds("rollout/failed_chains/"),
        "resampled": int(total("rollout/resampled_chains")),
        "dropped_groups": int(total("rollout/dropped_groups")),
        "dropped_chains": int(total("rollout/dropped_chains")),
        "tool_errors": kinds("rollout/failures/tool_kinds/"),
        "no_signal_iterations": int(max((m.get("training/no_signal_iterations", 0.0) for m in train.values()), default=0)),
    }


def failure_lines(f: dict[str, Any]) -> list[str]:
    """:func:`failures` in words, one line each (the report's and the console's)."""
    def listed(counts: dict[str, int]) -> str:
        return ", ".join(f"{k} {n}" for k, n in counts.items())

    if f["chains"]:
        lines = [f"chains failed (rollout/failed_chains/*): {listed(f['chains'])}; re-run {f['resampled']}, "
                 f"groups dropped {f['dropped_groups']} ({f['dropped_chains']} training chains)"]
    else:
        lines = ["chains failed (rollout/failed_chains/*): none"]
    if f["tool_errors"]:
        lines.append(f"tool calls that returned an error (rollout/failures/tool_kinds/*): {listed(f['tool_errors'])}")
    if f["no_signal_iterations"]:
        lines.append(f"iterations with no learning signal (every group's rewards equal): {f['no_signal_iterations']}")
    return lines


def _one_line(text: Any) -> str:
    return " ".join(str(text or "").split())


def _sample_text(record: dict[str, Any]) -> str:
    """The chain after the question, one line per message (tool calls and observations as text)."""
    messages = record.get("messages") or []
    lines = [
        f"{m.get('role', '?')}: {_one_line(m.get('content'))}"
        for m in messages
        if m.get("role") not in ("system", "user")
    ]
    if not lines and record.get("response_text"):
        lines = [_one_line(record["response_text"])]
    return "\n".join(lines)


def _question(record: dict[str, Any]) -> str:
    row = record.get("row") or {}
    for key in ("question", "prompt", "problem", "instruction"):
        if row.get(key):
            return str(row[key])
    users = [m for m in record.get("messages") or [] if m.get("role") == "user"]
    return str(users[0].get("content", "")) if users else "?"


def samples(
    run_dir: Path, first: int | None, last: int | None, k: int = NUM_SAMPLES
) -> tuple[list[dict[str, Any]], str | None]:
    """Up to ``k`` validation questions with the chain before and after training (same rows).

    Taken from the validation files as configured (the greedy ones when there are none).
    Returns (samples, what is missing or None).
    """
    files = _val_files(run_dir, "val") or _val_files(run_dir, "val_greedy")
    if not files:
        return [], "no validation trajectories (trajectories/val_trajectories_iter*.jsonl)"
    first = first if first in files else min(files)
    last = last if last in files else max(files)
    if first == last:
        return [], f"validation trajectories for one iteration only ({first})"
    before, after = _read_jsonl(files[first]), _read_jsonl(files[last])
    after_by_q = {}
    for rec in after:
        after_by_q.setdefault(_question(rec), rec)
    out = []
    for rec in before:
        q = _question(rec)
        if q in after_by_q and all(s["question"] != q for s in out):
            out.append(
                {
                    "question": q,
                    "answer": (rec.get("row") or {}).get("answer"),
                    "before": {
                        "iteration": first,
                        "reward": rec.get("reward"),
                        "text": _sample_text(rec),
                    },
                    "after": {
                        "iteration": last,
                        "reward": after_by_q[q].get("reward"),
                        "text": _sample_text(after_by_q[q]),
                    },
                }
            )
        if len(out) == k:
            break
    return out, None if out else "no validation question appears both before and after"


# ---------------------------------------------------------------------------------- plot


def plot(
    train: dict[int, dict[str, float]], val: dict[int, dict[str, float]], path: Path
) -> list[str]:
    """Write the 2x2 figure (reward, accuracy, KL, entropy); returns what was missing from it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    missing: list[str] = []
    its = sorted(train)
    fig, axes = plt.subplots(2, 2, figsize=(10, 7), sharex=True)
    panels = {
        "reward": (axes[0][0], "training/reward/mean", "training rollouts", "reward"),
        "accuracy": (axes[0][1], "rollout/accuracy", "training rollouts", "accuracy"),
    }
    for name, (ax, key, label, metric) in panels.items():
        xs = [i for i in its if key in train[i]]
        if xs:
            ax.plot(xs, [train[i][key] for i in xs], lw=1, alpha=0.6, label=label)
        sources = _sources(val)
        greedy_beside = any(k.startswith("val_greedy/") for m in val.values() for k in m)
        for source in sources:
            for prefix, style, tag in (
                ("val", "o-", "validation, sampled" if greedy_beside else "validation"),
                ("val_greedy", "s--", "validation, greedy"),
            ):
                vkey = f"{prefix}/{source}/{metric}"
                vx = [i for i in sorted(val) if vkey in val[i]]
                if vx:
                    label = tag if len(sources) == 1 else f"{tag} ({source})"
                    ax.plot(vx, [val[i][vkey] for i in vx], style, label=label)
        if not xs and not val:
            missing.append(f"{name}: no metric")
        ax.set_title(name)
        if ax.get_legend_handles_labels()[0]:  # a panel with nothing plotted has no legend
            ax.legend(fontsize=7)
    kl_key = next((k for k in KL_KEYS if any(k in train[i] for i in its)), None)
    ax = axes[1][0]
    if kl_key:
        xs = [i for i in its if kl_key in train[i]]
        ax.plot(xs, [train[i][kl_key] for i in xs], lw=1)
        ax.set_title(f"KL to the reference ({kl_key})")
    else:
        missing.append("KL: no KL metric logged (no KL term in the loss or the reward)")
        ax.text(
            0.5,
            0.5,
            "no KL metric logged\n(no KL term in the loss or reward)",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
        ax.set_title("KL")
    ax = axes[1][1]
    xs = [i for i in its if "actor/entropy" in train[i]]
    if xs:
        ax.plot(xs, [train[i]["actor/entropy"] for i in xs], lw=1)
    else:
        missing.append("entropy: no actor/entropy metric")
    ax.set_title("entropy (per sampled token)")
    for ax in axes[1]:
        ax.set_xlabel("iteration")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return missing


# ---------------------------------------------------------------------------------- output


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def _pair(pair: tuple[float | None, float | None]) -> str:
    return f"{_fmt(pair[0])} → {_fmt(pair[1])}"


def _time_line(result: dict[str, Any]) -> str:
    """Iterations and training time of the whole run; when it was resumed, this launch's own
    beside them, so that each "in all" holds the training time said with it."""
    line = f"{result['iterations']} iterations"
    if result["training_s"] is not None:
        line += f", training {result['training_s']:.0f} s ({result['s_per_iteration']:.2f} s/iteration)"
    resumed = result["launches"] > 1
    if resumed:
        line += f" over {result['launches']} launches"
    if result["elapsed_s"] is None:
        return line
    in_all = f"{result['elapsed_s']:.0f} s in all (start-up and validation included)"
    if not resumed:
        return f"{line}, {in_all}"
    n = result["launch_iterations"]
    this = [f"{n} iteration" + ("" if n == 1 else "s")]
    if result["launch_training_s"] is not None:
        this.append(f"training {result['launch_training_s']:.0f} s")
    return f"{line}; this launch: {', '.join([*this, in_all])}"


def _has_greedy(table: list[dict[str, Any]]) -> bool:
    return any(r["val_greedy"] != (None, None) for r in table)


def _columns(table: list[dict[str, Any]]) -> list[str]:
    """With a greedy pass beside it, the configured validation is the sampled one."""
    return ["sampled", "greedy"] if _has_greedy(table) else ["validation"]


def _cells(row: dict[str, Any], greedy: bool) -> list[str]:
    return [_pair(row["val"]), _pair(row["val_greedy"])] if greedy else [_pair(row["val"])]


def _markdown(result: dict[str, Any]) -> str:
    lines = ["# Run report", "", f"Run: `{result['run_dir']}`. {_time_line(result)}.", ""]
    if result["table"]:
        greedy = _has_greedy(result["table"])
        lines += [
            f"Validation at iteration {result['before_iteration']} → {result['after_iteration']}:",
            "",
            f"| source | metric | {' | '.join(_columns(result['table']))} |",
            "|---|---|---|---|" if greedy else "|---|---|---|",
        ]
        lines += [
            f"| {r['source']} | {r['metric']} | {' | '.join(_cells(r, greedy))} |"
            for r in result["table"]
        ]
        lines.append("")
    if result["failures"] is not None:
        lines += ["Failures over the run:", ""] + [f"- {line}" for line in failure_lines(result["failures"])] + [""]
    if result["plot"]:
        lines += [f"![training curves]({PLOT_NAME})", ""]
    for i, s in enumerate(result["samples"], 1):
        lines += [f"## Sample {i}: {s['question']} (answer {s['answer']})", ""]
        for when in ("before", "after"):
            part = s[when]
            lines += [
                f"{when.capitalize()} (iteration {part['iteration']}, reward {_fmt(part['reward'])}):",
                "",
                "```",
                part["text"],
                "```",
                "",
            ]
    if result["missing"]:
        lines += ["Missing:", ""] + [f"- {m}" for m in result["missing"]] + [""]
    return "\n".join(lines)


def _print(result: dict[str, Any]) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # plain text
        print(_markdown(result))
        return
    console = Console(soft_wrap=True)  # paths and chains unbroken in logs
    console.print(f"[bold]Run report[/bold] ({result['run_dir']}): {_time_line(result)}")
    if result["table"]:
        greedy = _has_greedy(result["table"])
        table = Table(
            title=f"validation, iteration {result['before_iteration']} → {result['after_iteration']}"
        )
        for col in ("source", "metric", *_columns(result["table"])):
            table.add_column(col)
        for r in result["table"]:
            table.add_row(r["source"], r["metric"], *_cells(r, greedy))
        console.print(table)
    if result["failures"] is not None:
        for line in failure_lines(result["failures"]):
            console.print(f"failures: {line}", markup=False, highlight=False)
    for s in result["samples"]:
        console.print(
            f"[bold]{s['question']}[/bold] (answer {s['answer']})", markup=True, highlight=False
        )
        for when in ("before", "after"):
            part = s[when]
            console.print(f"  {when} (reward {_fmt(part['reward'])}):", highlight=False)
            console.print(
                "    " + part["text"].replace("\n", "\n    "), markup=False, highlight=False
            )
    for m in result["missing"]:
        console.print(f"missing: {m}", markup=False, highlight=False)
    for name in ("plot", "report"):
        if result[name]:
            console.print(f"{name}: {result[name]}", markup=False, highlight=False)


def write_run_report(
    run_dir: Path, *, elapsed_s: float | None = None, console: bool = True
) -> dict[str, Any]:
    """Summarise a run directory: print the table and samples, write the plot and ``report.md``.

    Args:
        run_dir: the run directory (``trainer.default_local_dir``).
        elapsed_s: wall time of the command that ends with this report (the newest launch), when
            the caller measured it.
        console: print the report (rich when installed, else plain text).

    Returns:
        ``run_dir``, ``iterations``, ``training_s`` (sum of iteration times), ``s_per_iteration``,
        ``launches``, ``launch_iterations``, ``launch_training_s`` (:func:`launch_timing`),
        ``elapsed_s``, ``before_iteration``/``after_iteration`` (the validations compared),
        ``before``/``after`` (every validation metric at those iterations, by key), ``table``
        (rows: ``source``, ``metric``, ``val`` and ``val_greedy`` as (before, after) pairs),
        ``failures`` (:func:`failures`; None without training rows), ``samples``, ``missing``
        (what could not be reported, in words), ``plot`` and ``report``
        (paths written, or None).
    """
    run_dir = Path(run_dir)
    missing: list[str] = []
    train, val = read_metrics(run_dir)
    if not train:
        missing.append(
            "no training metrics (metrics/version_*/metrics.csv with training/iteration)"
        )
    table, first, last = comparison(val)
    if not val:
        missing.append("no validation metrics (val/... in the metrics CSVs)")
    elif first == last:
        missing.append(f"one validation only (iteration {first}): no before → after")
    if val and not _has_greedy(table):
        missing.append("no greedy validation (val_greedy/...)")
    result: dict[str, Any] = {
        "run_dir": str(run_dir),
        **timing(train),
        **launch_timing(run_dir),
        "elapsed_s": elapsed_s,
        "before_iteration": first,
        "after_iteration": last,
        "before": dict(val.get(first, {})) if first is not None else {},
        "after": dict(val.get(last, {})) if last is not None else {},
        "table": table,
        "failures": failures(train) if train else None,
    }
    result["samples"], why = samples(run_dir, first, last)
    if why:
        missing.append(why)
    result["plot"] = None
    if train or val:
        try:
            missing += plot(train, val, run_dir / PLOT_NAME)
            result["plot"] = str(run_dir / PLOT_NAME)
        except ImportError as e:
            missing.append(f"plot: matplotlib is not installed ({e})")
    else:
        missing.append("plot: nothing to plot")
    result["missing"] = missing
    result["report"] = None
    if run_dir.is_dir():
        (run_dir / REPORT_NAME).write_text(_markdown(result), encoding="utf-8")
        result["report"] = str(run_dir / REPORT_NAME)
    if console:
        _print(result)
    return result
