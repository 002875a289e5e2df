"""Environment steps per second: many environments in flight against one stepped alone.

``--through envs`` (the default): each environment runs in its own process
(agentfly.envs.process.ProcessEnv) and is driven by a thread of this process; each plays one long
episode of harmless actions (look, inventory), so that steps, not resets, are measured; setup
(process start, reset) is not timed.

``--through rollout``: the rollout side itself: the agent loop runs that many chains of one task
at once (``--envs`` is the chains), each with its own environment (the tool ``textworld_step`` or
``scienceworld_explorer``, reset when its chain starts), an instant scripted engine answering
every turn with one harmless action, ``--turns`` turns each. Steps per second are counted from
the steps' own times (``Trajectory.environments``): over the span in which every chain steps (the
last chain's first step to the first chain's last), the chains' start-up left out.

    python bench/envs_throughput.py textworld --envs 1,64 --seconds 20
    python bench/envs_throughput.py scienceworld --envs 1,16 --seconds 30
    python bench/envs_throughput.py textworld --through rollout --envs 1,64 --turns 40

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


TOOLS = {"textworld": "textworld_step", "scienceworld": "scienceworld_explorer"}


def register_instant_engine() -> None:
    """``bench_instant``: the scripted engine's one turn for every chain, without decoding the
    prompt (the scripted engine decodes it to count turns: work that grows with the chain)."""
    from agentfly.rollout.engines.base import GenerationOutput, per_prompt, register_engine
    from agentfly.rollout.engines.scripted import ScriptedEngine

    @register_engine("bench_instant")
    class Instant(ScriptedEngine):
        def generate(self, prompts, sampling):
            ids = self._tokenizer.encode(self.script[0] + self.end_of_turn, add_special_tokens=False)
            return [[GenerationOutput(ids, [self.logprob] * len(ids), "stop")] * sp.n
                    for sp in per_prompt(prompts, sampling)]


def rollout_measure(kind: str, task: dict, chains: int, turns: int, model_dir: str) -> dict:
    """``chains`` chains of ``task`` through the agent loop (see the module docstring)."""
    from agentfly.rollout.agent_loop import AgentLoop
    from agentfly.rollout.agents import get_agent
    from agentfly.rollout.engines import EnginePool
    from agentfly.rollout.templates import get_template
    from agentfly.rollout.tools.bind import bind_tools

    tools = bind_tools([TOOLS[kind]], {TOOLS[kind]: {"max_steps": None, "max_resources": chains}})
    script = [f"<action>{ACTIONS[kind][0]}</action>"]
    pool = EnginePool("bench_instant", 0, engine_kwargs={"model": model_dir, "script": script})
    loop = AgentLoop(engine=pool, tokenizer=pool.tokenizer, template=get_template("action-agent"),
                     agent=get_agent("action", tools), max_turns=turns, num_chains=chains,
                     max_tokens=32, max_model_len=10**7)
    start = time.monotonic()
    trajs = loop.run([{**task, "question": "Explore."}])
    elapsed = time.monotonic() - start
    episodes = [t.environments[kind]["steps"] for t in trajs]
    failed = [t.error or t.finish_reason for t in trajs if t.finish_reason != "max_turns"]
    window = (max(e[0]["at"] for e in episodes), min(e[-1]["at"] + e[-1]["seconds"] for e in episodes))
    done = sum(1 for e in episodes for s in e if window[0] <= s["at"] + s["seconds"] <= window[1])
    span = window[1] - window[0]
    # seconds of steps inside the window: over its length, how many chains were in a step on average
    inside = sum(max(0.0, min(s["at"] + s["seconds"], window[1]) - max(s["at"], window[0])) for e in episodes for s in e)
    mean_step = sum(s["seconds"] for e in episodes for s in e) / sum(map(len, episodes))
    return {"env": kind, "chains": chains, "steps": sum(map(len, episodes)), "rollout_s": round(elapsed, 1),
            "window_s": round(span, 2), "steps_per_s": round(done / span, 1) if span > 0 else None,
            "mean_step_ms": round(1000 * mean_step, 1),
            "chains_stepping_at_once": round(inside / span, 1) if span > 0 else None, "failed": failed[:3]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("env", choices=["textworld", "scienceworld"])
    parser.add_argument("--envs", default="1,64", help="comma-separated numbers of environments (chains) in flight")
    parser.add_argument("--seconds", type=float, default=20.0, help="stepping time per measurement (envs)")
    parser.add_argument("--through", choices=["envs", "rollout"], default="envs")
    parser.add_argument("--turns", type=int, default=40, help="turns of each chain (rollout)")
    args = parser.parse_args()
    task = task_for(args.env)
    if args.through == "rollout":
        from agentfly.models.tiny import build_tiny_model

        register_instant_engine()
        model_dir = str(build_tiny_model(tempfile.mkdtemp(prefix="bench_tok_") + "/model"))
        results = [rollout_measure(args.env, task, int(n), args.turns, model_dir) for n in args.envs.split(",")]
    else:
        results = [measure(args.env, task, int(n), args.seconds) for n in args.envs.split(",")]
    alone = results[0]["steps_per_s"]
    for r in results:
        r["x_alone"] = round(r["steps_per_s"] / alone, 2) if alone else None
        print(json.dumps(r))


if __name__ == "__main__":
    main()
