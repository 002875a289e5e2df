"""The typed training batch: collate builds it, its rows slice and split together, it moves to a
device the way Lightning moves a batch, and the layers import one way."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from lightning.fabric.utilities.apply_func import move_data_to_device

from agentfly.core.batch import RolloutBatch
from agentfly.core.trajectory import Trajectory
from agentfly.rollout.collate import collate_trajectories

ROWS = 5


def make_batch() -> RolloutBatch:
    """Five chains with prompts of 2 and 3 tokens; chain i's reward is i; optional fields set."""
    trajs = []
    for i in range(ROWS):
        t = Trajectory(prompt_ids=[7] * (2 + i % 2), group_id=i // 2, reward=float(i))
        t.append_sampled([10 + i, 11 + i], [0.0, 0.0])
        if i % 2:
            t.append_observation([90])
            t.append_sampled([12 + i], [0.0])
        trajs.append(t)
    batch = collate_trajectories(trajs, pad_id=0)
    batch.old_log_probs = torch.arange(ROWS * 4, dtype=torch.float32).reshape(ROWS, 4)
    batch.rollout_metrics = {"rollout/chains": float(ROWS)}
    return batch


def test_collate_lays_out_prompts_left_and_responses_right():
    batch = make_batch()
    assert len(batch) == ROWS and batch.prompt_length == 3 and batch.response_length == 4
    # chain 0: prompt [7, 7] left-padded to 3, response [10, 11] right-padded to 4
    assert batch.input_ids[0].tolist() == [0, 7, 7, 10, 11, 0, 0]
    assert batch.responses[0].tolist() == [10, 11, 0, 0]
    # chain 1: [11, 12] sampled, the observation 90 not, then 13 sampled and rewarded (reward 1)
    assert batch.responses[1].tolist() == [11, 12, 90, 13]
    assert batch.response_mask[1].tolist() == [1.0, 1.0, 0.0, 1.0]
    assert batch.token_level_scores[1].tolist() == [0.0, 0.0, 0.0, 1.0]
    assert torch.equal(batch.token_level_rewards, batch.token_level_scores)
    assert batch.index.tolist() == [0, 0, 1, 1, 2]
    assert batch.reward_baselines is None and batch.advantages is None and batch.values is None


def test_select_and_split_take_the_same_rows_of_every_field():
    batch = make_batch()
    rows = torch.tensor([4, 1])
    picked = batch.select(rows)
    for name in ("input_ids", "attention_mask", "position_ids", "response_mask",
                 "token_level_scores", "token_level_rewards", "index", "old_log_probs"):
        assert torch.equal(getattr(picked, name), getattr(batch, name)[[4, 1]]), name
    assert picked.values is None  # an absent field stays absent
    assert picked.prompt_length == batch.prompt_length
    assert picked.rollout_metrics == batch.rollout_metrics
    parts = batch.split(2)
    assert [len(p) for p in parts] == [2, 2, 1]
    assert torch.equal(torch.cat([p.old_log_probs for p in parts]), batch.old_log_probs)
    assert torch.equal(torch.cat([p.input_ids for p in parts]), batch.input_ids)
    assert [len(p) for p in batch.split(None)] == [ROWS]


def test_lightning_moves_every_tensor_of_the_batch():
    moved = move_data_to_device(make_batch(), torch.device("meta"))
    assert isinstance(moved, RolloutBatch)
    assert moved.input_ids.is_meta and moved.old_log_probs.is_meta and moved.index.is_meta
    assert moved.values is None and moved.prompt_length == 3


def test_a_field_with_other_rows_is_refused_by_name():
    batch = make_batch()
    with pytest.raises(ValueError, match="old_log_probs has 2 rows, input_ids has 5"):
        RolloutBatch(**{**batch.__dict__, "old_log_probs": torch.zeros(2, 4)})


def test_layers_import_one_way():
    """estimators <- callbacks; the module loads no callback and no rollout module (it knows its
    hooks by their protocol, ``core/batch_hooks.py``), and the callbacks load no module."""
    callbacks = (
        "import sys\n"
        "def loaded(prefix): return sorted(m for m in sys.modules if m.startswith(prefix))\n"
        "import agentfly.estimators\n"
        "assert not loaded('agentfly.callbacks') and not loaded('agentfly.modules'), loaded('agentfly.')\n"
        "import agentfly.callbacks, agentfly.callbacks.iterations, agentfly.callbacks.weight_sync\n"
        "import agentfly.callbacks.requeue, agentfly.callbacks.progress\n"
        "import agentfly.callbacks.trajectory_table, agentfly.callbacks.advantage\n"
        "assert not loaded('agentfly.modules'), loaded('agentfly.modules')\n"
    )
    module = (
        "import sys\n"
        "def loaded(prefix): return sorted(m for m in sys.modules if m.startswith(prefix))\n"
        "import agentfly.modules.rl_module\n"
        "assert not loaded('agentfly.rollout'), loaded('agentfly.rollout')\n"
        "assert not loaded('agentfly.callbacks'), loaded('agentfly.callbacks')\n"
    )
    for code in (callbacks, module):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr[-2000:]
