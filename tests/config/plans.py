"""A run whose plan has every optional part on, and its files: the config the every-key tests
change one key of."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

from agentfly.cli import load_config

# Every optional part on: a critic (gae), KL in the loss and in the reward, sampled validation,
# wandb and console loggers, two GPU ranks, two mini-batches per rollout (the rollout-time
# log-prob pass runs).
BASE = [
    "actor_rollout_ref.model.path={data}/models/policy",
    "critic.model.path={data}/models/critic",
    "algorithm.adv_estimator=gae",
    "agent.init_config.reward_name=math_equal_reward_tool",
    "agent.init_config.tools=[calculator]",
    "data.train_batch_size=8",
    "agent.run_config.num_chains=4",
    "actor_rollout_ref.actor.ppo_mini_batch_size=16",
    "critic.ppo_mini_batch_size=16",
    "actor_rollout_ref.actor.use_kl_loss=True",
    "algorithm.use_kl_in_reward=True",
    "actor_rollout_ref.rollout.val_kwargs.do_sample=True",
    "trainer.logger=[console,wandb]",
    "trainer.n_gpus_per_node=2",
    "trainer.total_training_steps=10",
    "trainer.test_freq=5",
]

# a user's module: it registers nothing; its policy loss is named by `module:attr`
PLUGIN = '''"""A user's module."""
from agentfly.modules.losses import policy_loss


def halved(*args, **kwargs):
    loss, metrics = policy_loss(*args, **kwargs)
    return loss / 2, metrics
'''


def write_plan_data(root: Path) -> Path:
    """Task files (train, val, other), the user's module and model folders under ``root``."""
    rows = [{"question": f"What is {i}+1?", "problem": f"{i}+1", "answer": str(i + 1)} for i in range(40)]
    for name in ("train", "val", "other"):
        (root / f"{name}.json").write_text(json.dumps(rows))
    (root / "plugin.py").write_text(PLUGIN)
    for name in ("policy", "critic", "other"):  # model paths are checked when a run is planned
        (root / "models" / name).mkdir(parents=True)
    return root


def base(data: Path) -> list[str]:
    return [
        *(arg.replace("{data}", str(data)) for arg in BASE),
        f"data.train_files=[{data}/train.json]", f"data.val_files=[{data}/val.json]",
    ]


def compose(args: list[str]) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_config(args)
