"""The SmolLM2 example (examples/smollm2_calculator/, `make demo-smollm2`), shortened: each
stage for one iteration on the real model, through the example's own driver, and its report; the
held-out rows it wrote are scored through the example's configured calculator and reward."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.report_table import row_values

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "smollm2_calculator"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm2():
    try:
        from agentfly.models.smollm2 import prepare_smollm2

        return prepare_smollm2()
    except ModuleNotFoundError as e:  # make test installs it; a bare checkout may not have it
        pytest.skip(f"SmolLM2 is not installed here: {e}")


def assert_held_out_rows_score_as_the_reward_defines(rows: list[dict]) -> None:
    """Each held-out row scored by the example's reward as ``rl.yaml`` configures it ("1 right,
    0.1 wrong with a tool call, 0 without"), after its configured calculator computed the row's
    expression: the gold answer 1.0, a wrong one 0.1, the gold answer without a tool call 0."""
    from agentfly.core.trajectory import ToolCallRecord, Trajectory
    from agentfly.rollout.rewards import compute_reward
    from agentfly.rollout.tools.bind import bind_tools

    spec = importlib.util.spec_from_file_location("smollm2_problems", EXAMPLE / "problems.py")
    problems = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(problems)
    init = yaml.safe_load((EXAMPLE / "rl.yaml").read_text())["agent"]["init_config"]
    tools = {t.name: t for t in bind_tools(init["tools"], init.get("tool_config"))}
    # the held-out rows are problems of the example's own generator (make_data.py's seed 0)
    expressions = {p["question"]: p["expression"] for p in problems.splits(0)["held_out"]}
    for row in rows:
        expression, gold = expressions[row["question"]], row["answer"]
        observation = tools["calculator"](expression=expression)
        assert observation == gold, (expression, observation, gold)
        call = ToolCallRecord("calculator", {"expression": expression}, observation)
        scores = [compute_reward(init["reward_name"], answer, Trajectory(prompt_ids=[0], tool_calls=calls), row)
                  for answer, calls in ((gold, [call]), (str(int(gold) + 1), [call]), (gold, []))]
        assert [(s.failed, s.reward) for s in scores] == [(False, 1.0), (False, 0.1), (False, 0.0)], row


def test_each_stage_runs_one_iteration_and_the_report_compares_them(smollm2, tmp_path):
    small = ["trainer.total_training_steps=1", "trainer.save_freq=-1"]
    done = subprocess.run(
        [sys.executable, str(EXAMPLE / "run.py"), "--out", str(tmp_path), "--held-out", "3", *small,
         "--sft", "data.train_batch_size=4", "trainer.test_freq=-1", "trainer.val_before_train=false",
         "--rl", "data.train_batch_size=2", "agent.run_config.num_chains=2", "trainer.test_freq=1",
         "agent.run_config.max_turns=2",
         "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
         "agent.run_config.generation_config.max_tokens=32", "data.val_batch_size=3"],
        cwd=REPO, capture_output=True, text=True,
        # alone on a quiet machine about 3 minutes; beside the rest of make test's parallel pass
        # up to about twice that
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    held_out = [json.loads(line) for line in (tmp_path / "data" / "held_out.jsonl").read_text().splitlines()]
    assert len(held_out) == 3
    assert_held_out_rows_score_as_the_reward_defines(held_out)
    report = (tmp_path / "report.md").read_text()
    # the base model, after SFT (the fit's validation before training) and after the iteration
    assert "| held-out, 3 problems | base model | after SFT | RL iteration 1 |" in report
    for kind in ("sampled", "greedy"):
        rates = {m: row_values(report, f"{m}, {kind}") for m in ("tool-call rate", "format errors", "accuracy", "reward")}
        assert all(len(v) == 3 and all(x is not None and 0 <= x <= 1 for x in v) for v in rates.values()), rates
        # a chain without a tool call scores 0 and one with a call at most 1: reward <= tool-call rate
        assert all(r <= t for r, t in zip(rates["reward"], rates["tool-call rate"], strict=True)), rates
    assert (tmp_path / "curves.png").stat().st_size > 10_000
    assert (tmp_path / "sft" / "hf_actor" / "model.safetensors").exists()
    assert (tmp_path / "rl" / "hf_actor" / "model.safetensors").exists()
