"""The vision example (examples/gui_clicks/, `make demo-gui`), shortened: eight rows a file, each
stage for one iteration on the tiny Qwen2.5-VL the example builds, through the example's own
driver, and its report; the rows it wrote are scored through the example's configured reward."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.report_table import row_values

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "gui_clicks"

pytestmark = pytest.mark.slow


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_each_stage_runs_one_iteration_and_the_report_compares_them(tmp_path):
    pytest.importorskip("PIL")
    done = subprocess.run(
        [sys.executable, str(EXAMPLE / "run.py"), "--out", str(tmp_path), "--data-option=--rows=8",
         "trainer.total_training_steps=1", "trainer.save_freq=-1",
         "--sft", "data.train_batch_size=4", "trainer.test_freq=-1",
         "--rl", "data.train_batch_size=2", "agent.run_config.num_chains=2", "trainer.test_freq=1",
         "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
         "data.val_batch_size=8"],
        cwd=REPO, capture_output=True, text=True, timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    data = tmp_path / "data"
    demos, rl, held_out = (_rows(data / f"{n}.jsonl") for n in ("sft_train", "rl_train", "held_out"))
    assert len(demos) == len(rl) == len(held_out) == 8
    assert not {r["seed"] for r in rl} & {r["seed"] for r in held_out}
    # a demonstration clicks the centre of its shape's box, which the configured reward scores 1
    from agentfly.core.trajectory import Trajectory
    from agentfly.rollout.rewards import compute_reward

    reward = yaml.safe_load((EXAMPLE / "rl.yaml").read_text())["agent"]["init_config"]["reward_name"]
    for demo, row in zip(demos, rl, strict=True):
        (call,) = demo["messages"][-1]["tool_calls"]
        action = json.loads(call["function"]["arguments"])["action"]
        x1, y1, x2, y2 = row["gt_bbox"]
        centre = f"Action: click(start_box='({(x1 + x2) // 2},{(y1 + y2) // 2})')"
        assert action.startswith("click(start_box='(") and (data / demo["images"][0]).is_file()
        assert compute_reward(reward, centre, Trajectory(prompt_ids=[0]), row).extras["acc"] == 1.0
    report = (tmp_path / "report.md").read_text()
    assert "| held-out, 8 screens | base model | after SFT | RL iteration 1 |" in report
    for kind in ("sampled", "greedy"):
        for rate in ("click accuracy", "chains with an action"):
            values = row_values(report, f"{rate}, {kind}")
            assert len(values) == 3 and all(v is not None and 0 <= v <= 1 for v in values), (rate, kind, values)
    assert (tmp_path / "curves.png").stat().st_size > 10_000
    assert (tmp_path / "rl" / "hf_actor" / "preprocessor_config.json").exists()
