"""A fault in some calls costs only the chains it hits (issue 29): no collateral failure.

The demo config (``conf/examples/demo_calculator.yaml``: its data, model, template and GRPO
settings), its calculator swapped for user code that misbehaves on 30 % of its calls
(:mod:`tests.faults.flaky`), turns scripted so that each chain run makes one call of the flaky
tool, or one reward call; 64 chains in flight on 2 worker processes (``tool_exit``: 32). Each
misbehaving call leaves a file; the run's counted failed chain
runs (``rollout/failed_chains``, re-runs included, summed over the iterations) must equal the
files: a call that waited behind a hung one, or for a replacement worker, or called another
tool, or scored another chain, never fails. The cases run at once, in processes of their own
(they mostly wait on 1 s deadlines):

- ``tool_hang``, ``tool_exit``: the tool hangs / ends its process on 30 % of calls;
- ``reward_hang``: the reward hangs on 30 % of calls;
- ``beside_hung``: a healthy tool, and a tool that always hangs called by 30 % of the chains
  (its breaker turned off: by default such a tool stops the run, :mod:`tests.faults.test_hung_tool`;
  here what it costs the other chains is counted).

``tool_exit`` trains 10 iterations (the default ``resample`` keeps every group it can).
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "conf" / "examples" / "demo_calculator.yaml"
CHAINS_PER_PROMPT = 8  # the demo config's num_chains


@dataclass(frozen=True)
class Case:
    calls: str  # the flaky_script engine's first turn (FLAKY_CALLS)
    failure: str  # the only reason chains may fail
    reward: str = "exact_answer"
    prompts: int = 8  # data.train_batch_size: 64 chains in flight
    iterations: int = 1
    overrides: tuple[str, ...] = ()


WORKERS = 2
CASES = {
    "tool_hang": Case("flaky_hang", "tool_timeout"),
    "tool_exit": Case("flaky_exit", "tool_worker_died", prompts=4, iterations=10),
    "reward_hang": Case("plus_one", "reward_timeout", reward="flaky_reward"),
    "beside_hung": Case(
        "plus_one|always_hang",
        "tool_timeout",
        overrides=(
            "agent.run_config.tool_breaker.first_calls=0",
            "agent.run_config.tool_breaker.window=0",
        ),
    ),
}


def fit_command(case: Case, run: Path) -> list[str]:
    chains = case.prompts * CHAINS_PER_PROMPT
    tools = case.calls.split("|")
    return [
        sys.executable, "-m", "agentfly.cli", "fit", "--config", str(CONFIG),
        "agent.init_config.plugins=[tests.faults.flaky]",
        f"agent.init_config.tools=[{','.join(tools)},answer]",
        f"agent.init_config.reward_name={case.reward}",
        "actor_rollout_ref.rollout.name=flaky_script",
        "actor_rollout_ref.rollout.num_engines=0",
        # the demo tokenizer spells the test tools' names a character a token
        "agent.init_config.max_model_len=256",
        "agent.run_config.generation_config.max_tokens=96",
        f"agent.run_config.workers.num_workers={WORKERS}",
        f"data.train_batch_size={case.prompts}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={chains}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={chains}",
        "actor_rollout_ref.actor.use_kl_loss=False",
        f"trainer.total_training_steps={case.iterations}",
        "trainer.test_freq=-1",
        "trainer.val_before_train=False",
        "trainer.save_freq=-1",
        "trainer.logger=[csv]",
        f"trainer.default_local_dir={run}",
        *case.overrides,
    ]


@dataclass
class Outcome:
    done: subprocess.CompletedProcess
    run: Path
    misbehaved: int  # files left by misbehaving calls


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, Outcome]:
    root = tmp_path_factory.mktemp("collateral")
    started = {}
    for name, case in CASES.items():
        (root / name / "calls").mkdir(parents=True)
        env = {**os.environ, "PYTHONPATH": str(REPO), "FLAKY_DIR": str(root / name / "calls"),
               "FLAKY_CALLS": case.calls, "HF_HUB_OFFLINE": "1", "RAY_TMPDIR": str(root / "ray")}
        command = fit_command(case, root / name / "run")
        started[name] = (command, subprocess.Popen(
            command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        ))
    out, deadline = {}, time.monotonic() + 600
    for name, (command, proc) in started.items():
        try:
            stdout, stderr = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
        done = subprocess.CompletedProcess(command, proc.returncode, stdout, stderr)
        out[name] = Outcome(done, root / name / "run", len(list((root / name / "calls").iterdir())))
    return out


def iteration_rows(run: Path) -> list[dict[str, str]]:
    rows = []
    for path in sorted((run / "metrics").glob("version_*/metrics.csv")):
        with path.open() as f:
            rows += [r for r in csv.DictReader(f) if r.get("training/iteration")]
    return rows


def counted(rows: list[dict[str, str]], metric: str) -> float:
    return sum(float(r.get(metric) or 0) for r in rows)


@pytest.mark.parametrize("name", list(CASES))
def test_only_the_chains_a_misbehaving_call_hit_fail(outcomes, name):
    case, outcome = CASES[name], outcomes[name]
    assert outcome.done.returncode == 0, outcome.done.stderr[-4000:]
    rows = iteration_rows(outcome.run)
    assert [int(float(r["training/iteration"])) for r in rows] == list(range(1, case.iterations + 1))
    assert outcome.misbehaved > 0  # 30 % of 32 calls or more
    failed = counted(rows, "rollout/failed_chains")
    assert failed == outcome.misbehaved, (name, failed, outcome.misbehaved, rows[-1])
    reasons = {  # every failure is of the fault's own kind (not a queue timeout, not a timeout)
        k.removeprefix("rollout/failed_chains/")
        for r in rows for k, v in r.items() if k.startswith("rollout/failed_chains/") and v
    }
    assert reasons == {case.failure}


def test_a_failed_reward_s_warning_says_the_chain_is_rolled_out_again(outcomes):
    err = outcomes["reward_hang"].done.stderr
    assert "reward 'flaky_reward' failed (timeout" in err, err[-3000:]
    assert "rolled out again (algorithm.failed_chains=resample, up to 3 times" in err
