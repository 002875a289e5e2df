"""A runnable config's words, and how the config tests compose and fail them."""

from __future__ import annotations

import warnings

import pytest
from omegaconf import OmegaConf

from agentfly.cli import load_config
from agentfly.config import ConfigError

MODEL = "Qwen/Qwen2.5-3B-Instruct"
# Enough to make a config runnable (model paths) and cheap to validate (one device, grpo).
BASE = [
    f"actor_rollout_ref.model.path={MODEL}",
    "algorithm.adv_estimator=grpo",
    "agent.run_config.num_chains=4",
    "data.train_batch_size=8",
    "actor_rollout_ref.actor.ppo_mini_batch_size=8",
    "trainer.n_gpus_per_node=1",
    "agent.init_config.reward_name=math_equal_reward",
]


def select(cfg, key: str):
    return OmegaConf.select(cfg, key)


def load_quiet(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_config(*args, **kwargs)


def error_of(args: list[str], config_file=None) -> str:
    with pytest.raises(ConfigError) as err:
        load_quiet(args, config_file)
    return str(err.value)
