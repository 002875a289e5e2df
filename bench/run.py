"""Run one workload on every system, alternating, and print the table.

    bench/.venv/bin/python bench/run.py w1                      # agentfly (hf, vllm) vs TRL
    bench/.venv/bin/python bench/run.py w3 --reps 5 --systems agentfly-hf,trl
    bench/.venv/bin/python bench/run.py w1 --device cuda --systems agentfly-hf,trl   # on a GPU
    bench/.venv/bin/python bench/run.py w4 --device cuda --systems agentfly-hf,trl --warmup 0 --reps 1
    bench/.venv/bin/python bench/run.py w4 --tiny --systems agentfly-hf,trl --reps 1   # W4's path, CPU

Each system is a worker process that builds its trainer once and then waits; the runner asks
each in turn for one iteration (the order rotates every round), so every system sees the same
machine conditions. The first ``--warmup`` rounds are not counted. Results go to
``bench/results/<workload>.json`` and ``.md`` (``<workload>_cuda.*`` with ``--device cuda``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _worker import PREFIX  # noqa: E402
from hardware import matmul_gflops, memory_gbps, model_shape  # noqa: E402
from make_w4_model import ensure_model  # noqa: E402
from workloads import REPO, WORKLOADS, model_path  # noqa: E402

PHASES = (
    "generation",
    "tools",
    "reward",
    "rollout_other",
    "logprob",
    "update",
    "weight_sync",
    "other",
)


class Worker:
    def __init__(self, name: str, cmd: list[str], log: Path, device: str) -> None:
        self.name = name
        self.log = log.open("w")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if device == "cpu":  # a CPU figure stays one on a machine that has a GPU
            env["CUDA_VISIBLE_DEVICES"] = ""
        self.proc = subprocess.Popen(
            cmd,
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env=env,
            start_new_session=True,
        )

    def read_event(self) -> dict:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(PREFIX):
                return json.loads(line[len(PREFIX) :])
            self.log.write(line)
        raise RuntimeError(f"{self.name} exited (rc={self.proc.wait()}); see {self.log.name}")

    def send(self, word: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(word + "\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        try:
            self.send("quit")
            self.proc.wait(timeout=120)
        except Exception:
            import signal

            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.log.close()


def command(system: str, workload: str, iterations: int, device: str) -> list[str]:
    py = sys.executable
    common = ["--workload", workload, "--iterations", str(iterations), "--device", device]
    if system.startswith("trl"):  # "trl-gc": with TRL's default gradient checkpointing
        extra = ["--gradient-checkpointing"] if system == "trl-gc" else []
        return [py, str(HERE / "trl_worker.py"), *common, *extra]
    # agentfly-<engine>[@ray][+<mode>]: @ray puts the engine in a Ray actor (num_engines=1; the
    # default on one CPU machine is the engine in the training process, as `agentfly fit`);
    # +1off / +asyncN: trainer.rollout_mode=one_step_off / async with max_staleness=N
    # +eager / +graphs: actor_rollout_ref.rollout.enforce_eager=true / false (unset: the engine's
    # default: vLLM's CUDA graphs, the transformers engine's dynamic cache; +graphs measures its static one)
    rest, *mods = system.split("-", 1)[1].split("+")
    engine, _, placement = rest.partition("@")
    out = [py, str(HERE / "agentfly_worker.py"), *common, "--engine", engine]
    if placement == "ray":
        out += ["--num-engines", "1"]
    for mode in mods:
        if mode == "1off":
            out += ["--mode", "one_step_off"]
        elif mode.startswith("async"):
            out += ["--mode", "async", "--staleness", mode[len("async") :] or "1"]
        elif mode in ("eager", "graphs"):
            out += ["--enforce-eager", "true" if mode == "eager" else "false"]
        else:
            raise SystemExit(f"unknown system suffix +{mode} in {system}")
    return out


def load_avg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def spread(values: list[float], fmt: str = "{:.2f}") -> str:
    if not values:
        return "-"
    lo, med, hi = min(values), statistics.median(values), max(values)
    return f"{fmt.format(med)} ({fmt.format(lo)}-{fmt.format(hi)})"


def summarize(args, results: dict[str, list[dict]], hw: dict, loads: list[str]) -> str:
    w = WORKLOADS[args.workload]
    shape = model_shape(model_path(w))
    lines = [f"## {w.title}", ""]
    precision = "bf16 mixed (fp32 master weights), engine bf16" if w.precision == "bf16" else "fp32"
    lines.append(
        f"{w.prompts} prompts x {w.group} generations, <= {w.max_new_tokens} new tokens"
        f"{f' per turn, <= {w.max_turns} turns' if w.max_turns > 1 else ''}, "
        f"{f'{w.mini_batches} mini-batches of {w.mini}, ' if w.mini_batches > 1 else ''}"
        f"micro-batch {w.micro}, {precision}, "
        f"{'GPU' if hw.get('device') == 'cuda' else 'CPU'}; "
        f"{args.reps} rounds after {args.warmup} warm-up, systems alternating"
        f"{f', {args.per_turn} counted iterations per turn' if args.per_turn > 1 else ''}"
        f"{f' after {args.settle} uncounted' if args.settle else ''}. "
        f"Model: {shape.params / 1e6:.2f}M parameters."
    )
    where = f"{hw['cpu']}, {hw['cores']} cores, torch threads {hw['threads']}"
    if hw.get("gpu"):
        where = f"{hw['gpu']} (beside {where})"
    bf16 = f", bf16 matmul {hw['bf16_gflops'] / 1e3:.0f} TFLOP/s" if hw.get("bf16_gflops") else ""
    lines.append(
        f"Machine: {where}; fp32 matmul {hw['matmul_gflops']:.0f} GFLOP/s, copy bandwidth "
        f"{hw['memory_gbps']:.1f} GB/s{' (GPU)' if hw.get('gpu') else ''}{bf16}; "
        f"load average (1/5/15 min) before/after: {loads[0]} / {loads[-1]}."
    )
    lines.append("")
    gpu = hw.get("device") == "cuda"
    lines.append(
        "| system | samples/s median (min-max) | gen tokens/s | ratio vs TRL (samples/s) | "
        "s/iteration | peak RSS GiB |" + (" peak GPU GiB |" if gpu else "")
    )
    lines.append("|---|---|---|---|---|---|" + ("---|" if gpu else ""))
    trl = results.get("trl", [])
    for system, its in results.items():
        sps = [i["samples"] / i["wall_s"] for i in its]
        tps = [i["gen_tokens"] / i["wall_s"] for i in its]
        ratio = "-"
        if system != "trl" and trl:
            pairs = [
                (a["samples"] / a["wall_s"]) / (b["samples"] / b["wall_s"])
                for a, b in zip(its, trl, strict=False)
            ]
            ratio = spread(pairs) + "x"
        lines.append(
            f"| {system} | {spread(sps, '{:.3f}')} | {spread(tps, '{:.1f}')} | {ratio} | "
            f"{spread([i['wall_s'] for i in its], '{:.1f}')} | {max(i['peak_rss_gib'] for i in its):.1f} |"
            + (f" {max(i.get('peak_gpu_gib') or 0 for i in its):.1f} |" if gpu else "")
        )
    lines.append("")
    drains = {s: [i.get("drained_s", 0.0) for i in its] for s, its in results.items()}
    drains = {s: d for s, d in drains.items() if any(d)}
    if drains:
        lines.append(
            "Counted in s/iteration: what a worker's rollouts ran on between its turns (rolled out "
            "ahead for the next turn), a share per counted iteration, median (max): "
            + ", ".join(
                f"{s} {statistics.median(d):.2f} ({max(d):.2f}) s" for s, d in drains.items()
            )
            + "."
        )
        lines.append("")
    lines.append("Time per phase (median seconds per iteration):")
    lines.append("")
    lines.append("| system | " + " | ".join(PHASES) + " | total |")
    lines.append("|---|" + "---|" * (len(PHASES) + 1))
    for system, its in results.items():
        meds = [statistics.median(i["phases"].get(p, 0.0) for i in its) for p in PHASES]
        lines.append(
            f"| {system} | "
            + " | ".join(f"{m:.2f}" for m in meds)
            + f" | {statistics.median(i['wall_s'] for i in its):.2f} |"
        )
    lines.append("")
    lines.append("Against the machine (medians):")
    lines.append("")
    peak = hw.get("bf16_gflops")
    # a bf16 workload's decode reads 2-byte weights and runs on the bf16 GEMM peak
    bf16 = w.precision == "bf16"
    gemm = (peak or hw["matmul_gflops"]) if bf16 else hw["matmul_gflops"]
    lines.append(
        "| system | gen tokens / iteration | generation tokens/s | decode bound tokens/s | "
        "fraction | update model GFLOP | update GFLOP/s | fraction of matmul |"
        + (" fraction of bf16 peak |" if peak else "")
    )
    lines.append("|---|---|---|---|---|---|---|---|" + ("---|" if peak else ""))
    for system, its in results.items():
        toks = statistics.median(i["gen_tokens"] for i in its)
        gen_s = statistics.median(i["phases"]["generation"] for i in its)
        gen_tps = toks / gen_s if gen_s else 0.0
        bound = shape.decode_bound(w.samples, hw["memory_gbps"], gemm, 2 if bf16 else 4)
        flops = [
            shape.update_flops(
                i["seq_tokens"], i["response_tokens"], i["seq_tokens"] / i["samples"] / 2
            )
            for i in its
        ]
        upd = [i["phases"]["update"] for i in its]
        rate = statistics.median(f / u / 1e9 for f, u in zip(flops, upd, strict=True) if u)
        lines.append(
            f"| {system} | {toks:.0f} | {gen_tps:.1f} | {bound:.0f} | {gen_tps / bound:.1%} | "
            f"{statistics.median(flops) / 1e9:.0f} | {rate:.1f} | {rate / hw['matmul_gflops']:.1%} |"
            + (f" {rate / peak:.2%} |" if peak else "")
        )
    lines.append("")
    extra = []
    for system, its in results.items():
        turns = [i["turns"] for i in its if i.get("turns") is not None]
        calls = [i["tool_calls"] for i in its if i.get("tool_calls") is not None]
        if turns:
            extra.append(
                f"{system}: turns/chain {statistics.median(turns):.2f}, tool calls/chain "
                f"{statistics.median(calls):.2f}"
            )
    if extra:
        lines += ["Rollout shape: " + "; ".join(extra) + ".", ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("workload", choices=sorted(WORKLOADS))
    ap.add_argument("--systems", default="agentfly-hf,agentfly-vllm,trl")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument(
        "--per-turn",
        type=int,
        default=1,
        help="counted iterations a system runs each time its turn comes (W3: its iterations are "
        "so short that the first one after another system ran is dominated by the switch)",
    )
    ap.add_argument(
        "--settle", type=int, default=0, help="uncounted iterations at the start of each turn"
    )
    ap.add_argument(
        "--device",
        default="cpu",
        choices=["cpu", "cuda"],
        help="where every system trains and generates; the machine figures are its own",
    )
    ap.add_argument(
        "--tiny",
        action="store_true",
        help="the workload's -tiny variant (w4-tiny): its path checked on the CPU in minutes",
    )
    args = ap.parse_args()
    if args.tiny:
        args.workload += "-tiny"
        if args.workload not in WORKLOADS:
            sys.exit(f"--tiny: no workload {args.workload}")
    ensure_model(WORKLOADS[args.workload])  # a random-weight workload's model, made once
    systems = args.systems.split(",")
    import signal

    # a timeout or kill still closes the workers (and their engine processes) in `finally`
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    import torch

    out_dir = HERE / "results"
    out_dir.mkdir(exist_ok=True)
    logs = HERE / "runs" / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    loads = [load_avg()]
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: no CUDA device is visible")
    hw = {
        "device": args.device,
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "matmul_gflops": matmul_gflops(args.device),
        "memory_gbps": memory_gbps(args.device),
    }
    if args.device == "cuda":
        hw["bf16_gflops"] = matmul_gflops(args.device, dtype="bfloat16")
        hw["gpu"] = torch.cuda.get_device_name()
        hw["torch"] = torch.__version__
        torch.cuda.empty_cache()  # the probe's buffers: the workers are other processes
    try:
        with open("/proc/cpuinfo") as f:
            hw["cpu"] = next(
                line.split(":", 1)[1].strip() for line in f if line.startswith("model name")
            )
    except (OSError, StopIteration):
        pass
    print(f"machine: {hw}", flush=True)
    iterations = args.warmup + args.reps * (args.settle + args.per_turn)
    workers: dict[str, Worker] = {}
    results: dict[str, list[dict]] = {s: [] for s in systems}
    startup: dict[str, float] = {}
    drained: dict[str, float] = {}  # per system: seconds its rollouts ran on between its turns
    name = args.workload if args.device == "cpu" else f"{args.workload}_{args.device}"
    try:
        for s in systems:  # one at a time: start-up is not what is measured
            cmd = command(s, args.workload, iterations, args.device)
            workers[s] = Worker(s, cmd, logs / f"{name}-{s}.log", args.device)
            ev = workers[s].read_event()
            startup[s] = ev["startup_s"]
            print(f"{s}: ready after {ev['startup_s']:.1f} s", flush=True)
        for r in range(args.warmup + args.reps):
            order = systems[r % len(systems) :] + systems[: r % len(systems)]
            warm = r < args.warmup
            for s in order:
                turn = (
                    ["warm-up"] if warm else ["settle"] * args.settle + ["counted"] * args.per_turn
                )
                for kind in turn:
                    workers[s].send("go")
                    ev = workers[s].read_event()
                    if kind == "counted" and drained.get(s):
                        # the rollouts the worker finished between its turns were made for these
                        # iterations: their time is counted in them, a share each (the most
                        # they can cost: in a run they would overlap the update)
                        ev["drained_s"] = drained[s] / args.per_turn
                        ev["wall_s"] += ev["drained_s"]
                    tag = kind if kind != "counted" else f"round {r - args.warmup + 1}"
                    print(
                        f"{tag} {s}: {ev['wall_s']:.2f} s, {ev['samples']} samples, "
                        f"{ev['gen_tokens']} tokens, load {load_avg()}, "
                        + ", ".join(f"{k} {v:.2f}" for k, v in ev["phases"].items() if v)
                        + (f", drained {ev['drained_s']:.2f}" if ev.get("drained_s") else "")
                        + (
                            f", peak GPU {ev['peak_gpu_gib']} GiB" if ev.get("peak_gpu_gib") else ""
                        ),
                        flush=True,
                    )
                    if kind == "counted":
                        results[s].append(ev)
                workers[s].send("trim")  # its freed heap back to the OS before the next system
                drained[s] = workers[s].read_event().get("drained_s", 0.0)
            loads.append(load_avg())
    finally:
        for wk in workers.values():
            wk.close()
    table = summarize(args, results, hw, loads)
    stamp = time.strftime("%Y-%m-%d %H:%M")
    table += "\nStart-up (not counted): " + ", ".join(f"{s} {v:.0f} s" for s, v in startup.items())
    table += f". Run {stamp}; load averages per round: {' | '.join(loads)}.\n"
    print("\n" + table)
    (out_dir / f"{name}.md").write_text(table)
    (out_dir / f"{name}.json").write_text(
        json.dumps(
            {"hardware": hw, "loads": loads, "startup": startup, "results": results, "when": stamp},
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
