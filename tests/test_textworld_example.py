"""The TextWorld example (examples/textworld_coins/, `make demo-textworld`), shortened: one game
per level in each file, each stage for one iteration on the real model, through the example's own
driver, and its report; the games it wrote are replayed through the example's configured tool
and reward."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.report_table import row_values

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "textworld_coins"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm2():
    pytest.importorskip("textworld")
    try:
        from agentfly.models.smollm2 import prepare_smollm2

        return prepare_smollm2()
    except ModuleNotFoundError as e:  # make test installs it; a bare checkout may not have it
        pytest.skip(f"SmolLM2 is not installed here: {e}")


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def assert_routes_score_as_the_reward_defines(data: Path) -> None:
    """Each RL and held-out game's walkthrough, its first half and none of it, played through the
    example's ``textworld_step`` and scored by its reward, both as ``rl.yaml`` configures them:
    1.0 for the game won, else 0.5 x (walkthrough commands played in order) / (its length)."""
    from agentfly.core.trajectory import Trajectory
    from agentfly.rollout.rewards import compute_reward
    from agentfly.rollout.tools.bind import bind_tools

    agent = yaml.safe_load((EXAMPLE / "rl.yaml").read_text())["agent"]
    init = agent["init_config"]
    (step,) = bind_tools(init["tools"], init["tool_config"])
    session = step.new_resource()
    try:
        for row in _rows(data / "rl_train.jsonl") + _rows(data / "held_out.jsonl"):
            route = row["walkthrough"]
            # level L: L - 1 moves, then the coin; the configured turns and steps leave room for all
            assert len(route) == row["difficulty"] and route[-1] == "take coin"
            assert len(route) <= min(agent["run_config"]["max_turns"], step.settings.max_steps)
            for played in (route, route[: len(route) // 2], []):
                session.start(row)
                for command in played:
                    step(action=command, resource=session)
                chain = Trajectory(prompt_ids=[0], environments={"textworld": session.record()})
                result = compute_reward(init["reward_name"], "", chain, row)
                expected = 1.0 if played == route else 0.5 * len(played) / len(route)
                assert not result.failed and result.reward == pytest.approx(expected), (row["game_file"], played)
    finally:
        session.close()


def test_each_stage_runs_one_iteration_and_the_report_compares_them(smollm2, tmp_path):
    small = ["trainer.total_training_steps=1", "trainer.save_freq=-1"]
    done = subprocess.run(
        [sys.executable, str(EXAMPLE / "run.py"), "--out", str(tmp_path), "--data-option=--games=1",
         "--data-option=--wrong-turns=0.5",
         "--held-out", "2", *small,
         "--sft", "data.train_batch_size=3", "trainer.test_freq=-1", "trainer.val_before_train=false",
         "--rl", "data.train_batch_size=2", "agent.run_config.num_chains=2", "trainer.test_freq=1",
         "agent.run_config.max_turns=2", "agent.init_config.tool_config.textworld_step.max_steps=2",
         "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
         "data.val_batch_size=2"],
        cwd=REPO, capture_output=True, text=True,
        # alone on a quiet machine about 3 minutes; beside the rest of make test's parallel pass
        # up to about twice that
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    data = tmp_path / "data"
    # the warm start sees routes of one to three moves (and wrong turns, each straight back); RL
    # and evaluation routes of two to four, on other games
    detours = 0
    for chat, moves in zip(_rows(data / "sft_train.jsonl"), (1, 2, 3), strict=True):
        actions = [m["content"] for m in chat["messages"] if m["role"] == "assistant"]
        assert actions[-1] == "<action>take coin</action>"
        assert (len(actions) - 1 - moves) % 2 == 0 and len(actions) - 1 >= moves
        detours += (len(actions) - 1 - moves) // 2
    assert detours > 0  # --wrong-turns=0.5 put some in
    rl, held_out = _rows(data / "rl_train.jsonl"), _rows(data / "held_out.jsonl")
    assert [r["difficulty"] for r in rl] == [3, 4, 5] and len(held_out) == 2
    assert not {r["game_file"] for r in rl} & {r["game_file"] for r in held_out}
    assert_routes_score_as_the_reward_defines(data)
    report = (tmp_path / "report.md").read_text()
    # the base model, after SFT (the fit's validation before training) and after the iteration
    assert "| held-out, 2 games | base model | after SFT | RL iteration 1 |" in report
    assert "| minutes of RL training | - | 0.0 |" in report  # the base model trained none
    for kind in ("sampled", "greedy"):
        for rate in ("success rate", "chains with an action", "format errors"):
            values = row_values(report, f"{rate}, {kind}")
            assert len(values) == 3 and all(v is not None and 0 <= v <= 1 for v in values), (rate, kind, values)
        # a chain plays one turn at least, and --rl's max_turns=2 at most
        assert all(v is not None and 1 <= v <= 2 for v in row_values(report, f"turns, {kind}"))
    assert "RL training (rollouts and updates, validation not counted): 1 iterations in" in report
    assert (tmp_path / "curves.png").stat().st_size > 10_000
    assert (tmp_path / "rl" / "hf_actor" / "model.safetensors").exists()
