"""``agentfly fit`` as a user runs it against the benchmark's figure, on the same workload.

    bench/.venv/bin/python bench/fit_check.py w3 --short 5 --long 45 --reps 2
    bench/.venv/bin/python bench/fit_check.py w1 --short 1 --long 3 --reps 1

Per round it runs, one after another:

- ``python -m agentfly.cli fit`` with the workload's settings (the overrides of
  ``agentfly_worker.py``, nothing else) for ``--short`` and for ``--long`` iterations, timing the
  whole process; ``(T_long - T_short) / (long - short)`` is fit's time per iteration, start-up,
  the first iteration's warm-up and the end-of-fit save cancelling out;
- the benchmark's agentfly worker (the same build, gated) for ``long - short`` iterations after
  ``--short`` uncounted ones: its mean seconds per iteration.

It prints both and their ratio per round, and beside them fit's own ``timing/iteration_s`` (the
wall time from one iteration's end to the next one's) over the same iterations of the long run:
on a shared machine the same W1 iteration's time varies widely from one process to the next
(figures in bench/README.md), which a difference of two short whole-process times magnifies,
while the logged iterations of the same process do not carry the start-up's noise. It writes ``bench/results/fit_<workload>.md`` / ``.json``.
The issue's acceptance: fit within 10 % of the benchmark. The order of the three runs rotates
every round.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from agentfly_worker import overrides  # noqa: E402
from run import Worker, load_avg  # noqa: E402
from workloads import REPO, WORKLOADS  # noqa: E402


def fit_seconds(workload: str, iterations: int, run_dir: Path, log: Path, env: dict) -> float:
    """Whole-process seconds of ``agentfly fit`` for ``iterations`` iterations."""
    w = WORKLOADS[workload]
    args = overrides(w, "hf", run_dir, iterations - 1, None)  # the worker asks for iterations + 1
    cmd = [sys.executable, "-m", "agentfly.cli", "fit", *args]
    start = time.perf_counter()
    with log.open("w") as out:
        proc = subprocess.run(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env=env, timeout=3600)
    seconds = time.perf_counter() - start
    if proc.returncode:
        raise RuntimeError(f"agentfly fit exited {proc.returncode}; see {log}")
    return seconds


def logged_seconds(run_dir: Path, first: int, last: int) -> float:
    """Mean ``timing/iteration_s`` of iterations ``first .. last - 1`` of a fit's CSV metrics."""
    from agentfly.run.report import read_metrics

    train, _ = read_metrics(run_dir)
    seconds = [train[i]["timing/iteration_s"] for i in sorted(train) if "timing/iteration_s" in train[i]]
    return statistics.mean(seconds[first:last])


def bench_seconds(workload: str, settle: int, counted: int, log: Path) -> float:
    """Mean seconds per iteration of the benchmark's agentfly worker after ``settle`` uncounted."""
    cmd = [
        sys.executable, str(HERE / "agentfly_worker.py"), "--workload", workload,
        "--iterations", str(settle + counted), "--engine", "hf",
        "--run-dir", tempfile.mkdtemp(prefix=f"fitcheck-{workload}-"),
    ]
    worker = Worker("agentfly-hf", cmd, log, "cpu")
    try:
        if worker.read_event()["event"] != "ready":
            raise RuntimeError(f"the worker did not start; see {log}")
        walls = []
        for k in range(settle + counted):
            worker.send("go")
            event = worker.read_event()
            if k >= settle:
                walls.append(event["wall_s"])
        return sum(walls) / len(walls)
    finally:
        worker.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("workload", choices=sorted(WORKLOADS))
    ap.add_argument("--short", type=int, default=5, help="iterations of the short fit")
    ap.add_argument("--long", type=int, default=45, help="iterations of the long fit")
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()
    if args.long <= args.short:
        ap.error("--long must be more than --short")
    counted = args.long - args.short
    logs = REPO / "bench" / "runs" / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix=f"fitcheck-{args.workload}-"))
    env = {
        **os.environ, "PYTHONUNBUFFERED": "1", "CUDA_VISIBLE_DEVICES": "",
        "RAY_TMPDIR": str(base / "ray"), "WANDB_MODE": "offline", "WANDB_DIR": str(base),
    }
    rounds = []
    for r in range(args.reps):
        loads = [load_avg()]
        figures: dict[str, float] = {}
        jobs = ["short", "long", "bench"]
        for job in jobs[r % 3:] + jobs[: r % 3]:
            log = logs / f"fitcheck-{args.workload}-{job}-{r}.log"
            if job == "bench":
                figures[job] = bench_seconds(args.workload, args.short, counted, log)
            else:
                n = args.short if job == "short" else args.long
                figures[job] = fit_seconds(args.workload, n, base / f"{job}{r}", log, env)
                if job == "long":
                    figures["logged"] = logged_seconds(base / f"{job}{r}", args.short, args.long)
            loads.append(load_avg())
        fit_per_it = (figures["long"] - figures["short"]) / counted
        ratio = fit_per_it / figures["bench"]
        logged_ratio = figures["logged"] / figures["bench"]
        rounds.append({
            **figures, "fit_per_iteration": fit_per_it, "ratio": ratio, "logged_ratio": logged_ratio,
            "loads": loads,
        })
        print(
            f"round {r}: fit {figures['short']:.1f} s ({args.short} it) / {figures['long']:.1f} s "
            f"({args.long} it) -> {fit_per_it:.3f} s/it; logged {figures['logged']:.3f} s/it; "
            f"bench {figures['bench']:.3f} s/it; fit / bench {ratio:.3f}, logged / bench "
            f"{logged_ratio:.3f}; load {' | '.join(loads)}",
            flush=True,
        )
    ratios = [x["ratio"] for x in rounds]
    logged = [x["logged_ratio"] for x in rounds]
    lines = [
        f"## `agentfly fit` against the benchmark, {args.workload}",
        "",
        f"`bench/fit_check.py {args.workload} --short {args.short} --long {args.long} --reps {args.reps}`, "
        f"{time.strftime('%Y-%m-%d %H:%M')}.",
        "",
        "| round | fit short (s) | fit long (s) | fit s/iteration | fit's logged s/iteration | "
        "bench s/iteration | fit / bench | logged / bench | load averages |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r, x in enumerate(rounds):
        lines.append(
            f"| {r} | {x['short']:.1f} | {x['long']:.1f} | {x['fit_per_iteration']:.3f} | "
            f"{x['logged']:.3f} | {x['bench']:.3f} | {x['ratio']:.3f} | {x['logged_ratio']:.3f} | "
            f"{' / '.join(x['loads'])} |"
        )
    lines += ["", f"fit / bench, median (min-max): {statistics.median(ratios):.3f} "
              f"({min(ratios):.3f}-{max(ratios):.3f}); logged / bench "
              f"{statistics.median(logged):.3f} ({min(logged):.3f}-{max(logged):.3f})"]
    out = REPO / "bench" / "results" / f"fit_{args.workload}"
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    out.with_suffix(".json").write_text(json.dumps({"args": vars(args), "rounds": rounds}, indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
