"""A hung tool costs the chains it hits their timeout, side by side; one that hangs on every
call stops the run, naming it (issue 37).

The demo config (``conf/examples/demo_calculator.yaml``: 16 prompts x 8 chains, GRPO), its
calculator swapped for ``flaky_hang`` (:mod:`tests.faults.flaky`, its timeout 5 s as in the
issue), turns scripted so that each chain run makes one call of it; 2 worker processes. The
cases run at once, in processes of their own:

- ``healthy``: no call hangs: the reference rollout time;
- ``hang_30_keep``: 30 % of the calls hang, failed chains kept with reward 0 (one round of
  chains; dropping their groups would drop nearly all, 8 chains each): the hung calls wait side
  by side, so the rollout takes its healthy time and one timeout, give or take the lending (at
  most two timeouts);
- ``hang_30``: the same with the default ``resample`` (up to 3 re-runs) and its default budget
  (``algorithm.resample_budget_s`` unset: the slowest failed run, a hung one): a failed chain is
  re-run as soon as it fails, beside the hung calls still waiting, and past the first round only
  a re-run expected to end within the budget starts (:mod:`agentfly.rollout.resampling`); so the
  rollout takes its healthy time and about two timeouts, failed chains counted as before (one per
  hung call);
- ``hang_100``: every call hangs: the tool's breaker stops the run with its 10th failed call,
  naming the tool and the counts, the failures having been said as they happened.

Before issue 37 a run of ``hang_100`` sat at its first iteration for 10 minutes, and one
iteration of ``hang_30`` took 137 s (a healthy one: 0.7 s).
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.serial]

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "conf" / "examples" / "demo_calculator.yaml"
TIMEOUT_S = 5.0  # the hung tool's, as in the issue
# a round's calls lend their places and fork workers within this: 1.75 s was seen with a
# parallel test pass and other jobs beside (load 7-10 on the 2 cores)
LENDING_S = 2.0


@dataclass(frozen=True)
class Case:
    rate: float  # FLAKY_RATE: the share of calls that hang
    overrides: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    iterations: int = 1
    plugins: tuple[str, ...] = ("tests.faults.flaky",)


CASES = {
    "healthy": Case(0.0),
    "hang_30_keep": Case(0.3, ("algorithm.failed_chains=keep",)),
    "hang_30": Case(0.3),
    "hang_100": Case(1.0, iterations=2),
}


def fit_command(case: Case, run: Path) -> list[str]:
    return [
        sys.executable, "-m", "agentfly.cli", "fit", "--config", str(CONFIG),
        f"agent.init_config.plugins=[{','.join(case.plugins)}]",
        "agent.init_config.tools=[flaky_hang,answer]",
        f"agent.init_config.tool_config={{flaky_hang: {{timeout: {TIMEOUT_S:g}}}}}",
        "agent.init_config.reward_name=exact_answer",
        "actor_rollout_ref.rollout.name=flaky_script",
        "actor_rollout_ref.rollout.num_engines=0",
        "agent.init_config.max_model_len=256",  # the demo tokenizer spells the tools' names
        "agent.run_config.generation_config.max_tokens=96",
        "agent.run_config.workers.num_workers=2",
        f"trainer.total_training_steps={case.iterations}",
        "trainer.test_freq=-1",
        "trainer.val_before_train=False",
        "trainer.save_freq=-1",
        "trainer.logger=[csv]",
        f"trainer.default_local_dir={run}",
        *case.overrides,
    ]  # fmt: skip


@dataclass
class Outcome:
    done: subprocess.CompletedProcess
    run: Path
    hung: list[float]  # when each call that hung began (its file's time)
    ended: float  # when the process ended (time.time())


def run_cases(cases: dict[str, Case], root: Path) -> dict[str, Outcome]:
    """Run each case's fit at once, each in a process of its own, and wait for them all."""
    started = {}
    for name, case in cases.items():
        calls = root / name / "calls"
        calls.mkdir(parents=True)
        env = {
            **os.environ, "PYTHONPATH": str(REPO), "FLAKY_DIR": str(calls), "FLAKY_CALLS":
            "flaky_hang", "FLAKY_RATE": str(case.rate), "HF_HUB_OFFLINE": "1",
            "RAY_TMPDIR": str(root / "ray"), "WORKER_START_MARKER": str(root / name / "marker"),
            **case.env,
        }  # fmt: skip
        command = fit_command(case, root / name / "run")
        started[name] = (command, subprocess.Popen(
            command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        ))  # fmt: skip
    out, deadline = {}, time.monotonic() + 600
    for name, (command, proc) in started.items():
        try:
            stdout, stderr = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
        ended = time.time()
        done = subprocess.CompletedProcess(command, proc.returncode, stdout, stderr)
        hung = sorted(p.stat().st_mtime for p in (root / name / "calls").iterdir())
        out[name] = Outcome(done, root / name / "run", hung, ended)
    return out


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, Outcome]:
    return run_cases(CASES, tmp_path_factory.mktemp("hung_tool"))


def iterations(run: Path) -> list[dict[str, float]]:
    """The metrics logged for each iteration of the run."""
    rows = []
    for path in sorted((run / "metrics").glob("version_*/metrics.csv")):
        with path.open() as f:
            rows += [
                {k: float(v) for k, v in row.items() if v}
                for row in csv.DictReader(f)
                if row.get("training/iteration")
            ]
    return rows


def first_iteration(run: Path) -> dict[str, float]:
    logged = iterations(run)
    assert logged, f"no iteration logged in {run}"
    return logged[0]


def rollout_s(outcomes, name: str) -> float:
    outcome = outcomes[name]
    assert outcome.done.returncode == 0, outcome.done.stderr[-4000:]
    return first_iteration(outcome.run)["timing/rollout_s"]


def test_hung_calls_wait_side_by_side(outcomes):
    """One round of chains (failed chains kept): the healthy rollout and about one timeout; at
    most two. Queued on the 2 workers, the ~38 hung calls would take ~19 timeouts."""
    healthy, hung = rollout_s(outcomes, "healthy"), rollout_s(outcomes, "hang_30_keep")
    assert outcomes["hang_30_keep"].hung  # some calls hung (30 % of 128)
    assert TIMEOUT_S <= hung <= healthy + 2 * TIMEOUT_S, (healthy, hung)


def test_with_resampling_the_rollout_takes_about_two_timeouts_and_failures_count_per_chain(
    outcomes,
):
    """Re-sampled as chains fail, within a budget of one timeout past the first round: every
    failed chain run is a hung call (no collateral); the rollout is its first round (every
    chain's first run: the healthy time, a timeout and the lending's delay) and at most one more
    timeout with its lending's delay, the re-runs' hung calls having started as the first ones
    timed out: the healthy time and two timeouts, each with its lending's delay."""
    healthy, hung = rollout_s(outcomes, "healthy"), rollout_s(outcomes, "hang_30")
    metrics = first_iteration(outcomes["hang_30"].run)
    assert metrics["rollout/failed_chains"] == len(outcomes["hang_30"].hung) > 0
    assert metrics["rollout/failed_chains/tool_timeout"] == metrics["rollout/failed_chains"]
    assert metrics["rollout/resampled_chains"] > 0
    first = metrics["timing/first_round_s"]
    assert TIMEOUT_S <= first < hung <= first + TIMEOUT_S + LENDING_S, (first, hung)
    assert hung <= healthy + 2 * (TIMEOUT_S + LENDING_S), (healthy, hung)


def test_a_tool_that_hangs_on_every_call_stops_the_run_naming_it(outcomes):
    """The 10th timed-out call trips the breaker: the run stops within 60 s of the first hung
    call (about one timeout: the first 10 calls hang side by side), with a message naming the
    tool and the counts; the first failure was said when it happened, before that."""
    outcome = outcomes["hang_100"]
    err = outcome.done.stderr
    assert outcome.done.returncode == 2, err[-3000:]  # said in a sentence, not a traceback
    said = "agentfly: tool 'flaky_hang' keeps failing: its first 10 calls all failed the same"
    assert said in err, err[-3000:]
    assert "10 of 10 calls failed (timeout ×10)" in err
    assert "agent.init_config.tool_config.flaky_hang.timeout=SECONDS" in err  # how to give it longer
    assert "Traceback (most recent call last)" not in err, err[-3000:]
    first = "tool 'flaky_hang' failed (timeout) on call 1"
    assert first in err and err.index(first) < err.index(said)
    assert outcome.ended - outcome.hung[0] < 60.0
    assert iterations(outcome.run) == []  # it stopped in its first rollout
