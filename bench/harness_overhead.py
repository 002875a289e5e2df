"""What a harness chain costs beyond a built-in one: rollout seconds of the demo task's chains by
the built-in ``hermes`` loop, by the example program as ``agent.harness.function`` and as
``agent.harness.command``, on the same rows, seeds and in-process engine, interleaved.

    .venv/bin/python bench/harness_overhead.py --rows 16 --chains 8 --reps 3

Prints each system's median seconds per rollout and its ratio to the built-in loop's (results
in bench/README.md, "Harness"). The chains are identical token for token (tests/rollout/test_harness.py),
so the difference is the HTTP round trips, the program's own work and, for the command, its
process start-up.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> None:
    from agentfly.rollout.agent_loop import AgentLoop
    from agentfly.rollout.agents import get_agent
    from agentfly.rollout.engines import EnginePool
    from agentfly.rollout.harness import Harness, HarnessLoop
    from agentfly.rollout.templates import get_template
    from agentfly.rollout.tools.bind import bind_tools

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--chains", type=int, default=8)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--systems", default="builtin,function,command")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    pool = EnginePool("transformers", 0, engine_kwargs={"model": str(REPO / "agentfly/demo/model"),
                                                        "device": "cpu", "seed": 0})
    tok = pool.tokenizer
    rows = json.loads((REPO / "agentfly/demo/data/train.json").read_text())[: args.rows]
    common = dict(engine=pool, tokenizer=tok, template=get_template("qwen2.5-no-system-tool", tok),
                  reward="math_equal_reward_tool", max_turns=3, max_tokens=24, max_model_len=80,
                  num_chains=args.chains, temperature=1.0, seed=0)
    program = REPO / "examples/harness/calculator_agent.py"
    loops = {
        "builtin": AgentLoop(agent=get_agent("hermes", bind_tools(["calculator", "answer"], {})), **common),
        "function": HarnessLoop(agent=get_agent("hermes", []), harness=Harness(function=f"{program}:solve"), **common),
        "command": HarnessLoop(agent=get_agent("hermes", []),
                               harness=Harness(command=f"{sys.executable} {program}"), **common),
    }
    systems = args.systems.split(",")
    seconds: dict[str, list[float]] = {s: [] for s in systems}
    loops["builtin"].run(rows[:2])  # warm the engine
    for _ in range(args.reps):
        for name in systems:
            began = time.perf_counter()
            trajs = loops[name].run(rows)
            seconds[name].append(time.perf_counter() - began)
            failed = [t.error for t in trajs if t.finish_reason == "error"]
            if failed:
                raise SystemExit(f"{name}: {len(failed)} of {len(trajs)} chains failed; the first: {failed[0]}")
    pool.shutdown()
    base = statistics.median(seconds["builtin"]) if "builtin" in seconds else None
    chains = args.rows * args.chains
    print(f"{chains} chains ({args.rows} rows x {args.chains}), {args.reps} reps, median seconds per rollout:")
    for name in systems:
        med = statistics.median(seconds[name])
        ratio = f"  x{med / base:.2f} of built-in, +{(med - base) / chains * 1000:.0f} ms a chain" if base else ""
        print(f"  {name:9s} {med:7.2f} s{ratio}   (all: {', '.join(f'{s:.2f}' for s in seconds[name])})")


if __name__ == "__main__":
    main()
