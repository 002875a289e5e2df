"""The SmolLM2 example (examples/smollm2_calculator/, `make demo-smollm2`), shortened: each
stage for 2 iterations on the real model, through the example's own driver, and its report."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

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


def test_each_stage_runs_two_iterations_and_the_report_compares_them(smollm2, tmp_path):
    small = ["trainer.total_training_steps=2", "trainer.save_freq=-1"]
    done = subprocess.run(
        [sys.executable, str(EXAMPLE / "run.py"), "--out", str(tmp_path), "--held-out", "4", *small,
         "--sft", "data.train_batch_size=4", "trainer.test_freq=-1",
         "--rl", "data.train_batch_size=2", "agent.run_config.num_chains=2", "trainer.test_freq=2",
         "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
         "agent.run_config.generation_config.max_tokens=32", "data.val_batch_size=4"],
        cwd=REPO, capture_output=True, text=True, timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    held_out = (tmp_path / "data" / "held_out.jsonl").read_text().splitlines()
    assert len(held_out) == 4
    report = (tmp_path / "report.md").read_text()
    # the base model, after SFT (the fit's validation before training) and after the 2 iterations
    assert "| held-out, 4 problems | base model | after SFT | RL iteration 2 |" in report
    assert "| tool-call rate, sampled |" in report and "| format errors, greedy |" in report
    assert (tmp_path / "curves.png").stat().st_size > 10_000
    assert (tmp_path / "sft" / "hf_actor" / "model.safetensors").exists()
    assert (tmp_path / "rl" / "hf_actor" / "model.safetensors").exists()
