"""Environment steps per second: many environments in flight against one stepped alone.

Each environment runs in its own process (agentfly.envs.process.ProcessEnv) and is driven by a
thread of this process, as a rollout's chains drive theirs: the steps of different environments
overlap. Each environment plays one long episode of harmless actions (look, inventory), so
that steps, not resets, are measured; setup (process start, reset) is not timed.

    python bench/envs_throughput.py textworld --envs 1,64 --seconds 20
    python bench/envs_throughput.py scienceworld --envs 1,16 --seconds 30

Memory: a TextWorld environment process takes ~100 MB, a ScienceWorld one ~250 MB with its
Java process; 64 ScienceWorld environments want ~16 GB.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from agentfly.envs.process import ProcessEnv

SCIENCEWORLD_TASK = {"task_name": "lifespan-longest-lived", "variation": 0}


def task_for(kind: str) -> dict:
    if kind == "textworld":
        from agentfly.envs.textworld import make_game

        return make_game(tempfile.mkdtemp(prefix="bench_tw_"), "tw-simple", 1, seed=3)
    return SCIENCEWORLD_TASK


ACTIONS = {"textworld": ("look", "inventory"), "scienceworld": ("look around", "inventory")}


def drive(env: ProcessEnv, kind: str, stop: threading.Event) -> int:
    """Step until ``stop``; returns the steps taken."""
    steps = 0
    while not stop.is_set():
        env.step(ACTIONS[kind][steps % 2])
        steps += 1
    return steps


def measure(kind: str, task: dict, num_envs: int, seconds: float) -> dict:
    start = time.monotonic()
    with ThreadPoolExecutor(num_envs) as pool:
        envs = list(pool.map(lambda _: ProcessEnv.named(kind, {"max_steps": None}, start_timeout=600), range(num_envs)))
    ready_s = time.monotonic() - start
    try:
        for env in envs:
            env.reset(task)
        stop = threading.Event()
        with ThreadPoolExecutor(num_envs) as pool:
            began = time.monotonic()
            futures = [pool.submit(drive, env, kind, stop) for env in envs]
            time.sleep(seconds)
            stop.set()
            steps = sum(f.result() for f in futures)
            elapsed = time.monotonic() - began
    finally:
        for env in envs:
            env.close()
    return {"env": kind, "envs": num_envs, "steps": steps, "seconds": round(elapsed, 2),
            "steps_per_s": round(steps / elapsed, 1), "start_s": round(ready_s, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("env", choices=["textworld", "scienceworld"])
    parser.add_argument("--envs", default="1,64", help="comma-separated numbers of environments in flight")
    parser.add_argument("--seconds", type=float, default=20.0, help="stepping time per measurement")
    args = parser.parse_args()
    task = task_for(args.env)
    results = [measure(args.env, task, int(n), args.seconds) for n in args.envs.split(",")]
    alone = results[0]["steps_per_s"]
    for r in results:
        r["x_alone"] = round(r["steps_per_s"] / alone, 2) if alone else None
        print(json.dumps(r))


if __name__ == "__main__":
    main()
