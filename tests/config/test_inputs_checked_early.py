"""Inputs that cannot work fail when the run is planned, before any model, engine or Ray starts,
naming the key and the value: a model path that does not exist, a batch larger than the data, a
prompt budget that leaves no room to generate."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from agentfly.cli import load_config
from agentfly.config import ConfigError
from agentfly.topology import Hardware

CPU = Hardware(gpus=0, cpus=2)


@pytest.fixture
def task(tmp_path: Path) -> Path:
    rows = [{"question": f"What is {i}+1?", "answer": str(i + 1)} for i in range(6)]
    (tmp_path / "train.json").write_text(json.dumps(rows))
    (tmp_path / "model").mkdir()
    return tmp_path


def args(task: Path, *extra: str) -> list[str]:
    return [
        f"data.train_files=[{task / 'train.json'}]",
        f"actor_rollout_ref.model.path={task / 'model'}",
        "agent.init_config.reward_name=math_equal_reward",
        "algorithm.adv_estimator=grpo",
        "agent.run_config.num_chains=2",
        "data.train_batch_size=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.rollout.num_engines=0",
        "trainer.n_gpus_per_node=1",
        f"trainer.default_local_dir={task / 'run'}",
        *extra,
    ]


@pytest.fixture
def nothing_may_start(monkeypatch):
    """Building an engine, a session or a model fails the test."""

    def started(*a, **k):
        raise AssertionError("something started before the bad input was refused")

    monkeypatch.setattr("agentfly.rollout.runner.build_rollout", started)
    monkeypatch.setattr("agentfly.fit.build_module", started)
    monkeypatch.setattr("agentfly.fit.build_datamodule", started)


def build(cfg):
    from agentfly.fit import build_trainer

    return build_trainer(cfg, hardware=CPU)


def test_a_model_path_that_does_not_exist_is_refused_by_key_and_path(task, nothing_may_start):
    missing = task / "no_such_model"
    cfg = load_config(args(task, f"actor_rollout_ref.model.path={missing}"))
    with pytest.raises(ConfigError) as err:
        build(cfg)
    assert f"actor_rollout_ref.model.path={str(missing)!r}" in str(err.value)


def test_the_critic_path_is_checked_when_a_critic_is_trained(task, nothing_may_start):
    bad = args(task, "algorithm.adv_estimator=gae", "critic.model.path=./no/critic")
    with pytest.raises(ConfigError, match=r"critic.model.path='./no/critic': no such file"):
        build(load_config(bad))
    # the same path with an estimator that trains no critic is not loaded, so not checked
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # named as having no effect: grpo trains no critic
        cfg = load_config(args(task, "critic.model.path=./no/critic"))
    from agentfly.models.paths import check_model_paths

    check_model_paths(cfg, needs_critic=False)


def test_a_repo_id_offline_must_be_in_the_local_cache(task, monkeypatch):
    from agentfly.models.paths import model_path_problem

    monkeypatch.setenv("HF_HUB_CACHE", str(task / "hub"))  # empty: nothing cached
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    key = "actor_rollout_ref.model.path"
    assert model_path_problem(key, "Qwen/Qwen2.5-3B-Instruct") is None  # may be downloaded
    assert "no such file" in model_path_problem(key, "/models/Qwen2.5")  # looks local
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(task / "hub"))
    problem = model_path_problem(key, "Qwen/Qwen2.5-3B-Instruct")
    assert problem and "Qwen/Qwen2.5-3B-Instruct" in problem and "HF_HUB_OFFLINE" in problem
    # a cached repo (config.json in the hub's snapshot layout) is accepted offline
    snapshot = task / "hub" / "models--Qwen--Qwen2.5-3B-Instruct" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (task / "hub" / "models--Qwen--Qwen2.5-3B-Instruct" / "refs").mkdir()
    (task / "hub" / "models--Qwen--Qwen2.5-3B-Instruct" / "refs" / "main").write_text("abc")
    assert model_path_problem(key, "Qwen/Qwen2.5-3B-Instruct") is None


def test_a_batch_larger_than_the_rows_names_both_numbers(task, nothing_may_start):
    cfg = load_config(args(task, "data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=16"))
    with pytest.raises(ConfigError) as err:
        build(cfg)
    assert "data.train_batch_size=8 is larger than the 6 training rows" in str(err.value)


def test_a_prompt_budget_that_leaves_no_room_is_refused_when_composed(task):
    with pytest.raises(ConfigError, match=r"data.max_prompt_length=80 leaves no room"):
        load_config(args(task, "agent.init_config.max_model_len=80", "data.max_prompt_length=80"))
    with pytest.raises(ConfigError, match=r"data.truncation: Expected a typing.Literal\['error', 'left', 'right', 'middle'\]. Got value: both"):
        load_config(args(task, "data.truncation=both"))
    load_config(args(task, "agent.init_config.max_model_len=80", "data.max_prompt_length=79"))
