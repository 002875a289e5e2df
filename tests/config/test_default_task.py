"""`agentfly fit` with no arguments trains the embedded demo; naming a task replaces it."""

from __future__ import annotations

from pathlib import Path

import agentfly
from agentfly.cli import load_config, main

PKG = Path(agentfly.__file__).resolve().parent


def test_no_arguments_is_the_demo_task(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the package paths do not depend on the working directory
    assert main(["fit", "--print_config"]) == 0
    printed = capsys.readouterr().out
    assert str(PKG / "demo" / "data" / "train.json") in printed
    assert str(PKG / "demo" / "model") in printed
    cfg = load_config(["trainer.total_training_steps=3"], default_task=True)
    assert cfg.algorithm.adv_estimator == "grpo"
    assert list(cfg.agent.init_config.tools) == ["calculator", "answer"]
    assert cfg.agent.init_config.reward_name == "math_equal_reward_tool"
    assert cfg.agent.run_config.num_chains > 1
    assert (cfg.actor_rollout_ref.rollout.name, cfg.actor_rollout_ref.rollout.num_engines) == ("transformers", None)
    assert cfg.trainer.total_training_steps == 3  # an override still applies on top
    assert Path(cfg.actor_rollout_ref.model.path).is_dir()


def test_a_task_of_ones_own_replaces_the_demo(tmp_path):
    data = tmp_path / "train.json"
    data.write_text('[{"question": "1+1?", "answer": "2"}]')
    ours = ["data.train_files=" + str(data), "actor_rollout_ref.model.path=/m", "critic.model.path=/m",
            "agent.init_config.reward_name=math_equal_reward"]
    cfg = load_config(ours, default_task=True)
    assert cfg.algorithm.adv_estimator == "gae"  # the key reference's default, not the demo's
    assert list(cfg.agent.init_config.tools) == []
    assert load_config(ours).algorithm.adv_estimator == "gae"
