"""FSDP wiring: the seed keys' fsdp_config → Lightning's FSDPStrategy, the wrapped block classes,
and where the actor's weights sit in a gathered state dict. FSDP itself needs GPUs (the `gpu`
test runs a fit under it); on CPUs `fit` falls back to DDP and says so."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
import torch
from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer

from agentfly.modules.fsdp import _actor_prefix, block_classes, fsdp_strategy
from agentfly.testing import build_tiny_model


def _fsdp_config(**kw):
    base = {"param_offload": False, "optimizer_offload": False, "reshard_after_forward": True, "fsdp_size": -1}
    return SimpleNamespace(**{**base, **kw})


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("fsdp") / "model")


def test_one_unit_per_transformer_block(model):
    assert block_classes(str(model)) == {Qwen2DecoderLayer}


@pytest.mark.parametrize(
    ("config", "world", "offload", "sharding"),
    [
        ({}, 8, False, "FULL_SHARD"),
        ({"param_offload": True}, 8, True, "FULL_SHARD"),
        ({"optimizer_offload": True}, 8, True, "FULL_SHARD"),
        ({"reshard_after_forward": False}, 8, False, "SHARD_GRAD_OP"),
        ({"fsdp_size": 4}, 8, False, "HYBRID_SHARD"),
        ({"fsdp_size": 8}, 8, False, "FULL_SHARD"),  # one group of all ranks: plain sharding
    ],
)
def test_seed_keys_map_onto_the_strategy(model, config, world, offload, sharding):
    from torch.distributed.fsdp import ShardingStrategy

    strategy = fsdp_strategy(_fsdp_config(**config), [str(model)], world)
    assert bool(strategy.cpu_offload and strategy.cpu_offload.offload_params) is offload
    assert strategy.sharding_strategy == getattr(ShardingStrategy, sharding)
    assert strategy.kwargs["use_orig_params"] is True
    assert strategy._state_dict_type == "full"  # checkpoints resume on any number of ranks
    if sharding == "HYBRID_SHARD":
        assert strategy.kwargs["device_mesh"] == (2, 4)


@pytest.mark.parametrize(
    ("keys", "prefix"),
    [
        (["actor.model.embed_tokens.weight", "reference.model.norm.weight"], "actor."),
        (["_forward_module.critic.score.weight", "_forward_module.actor.lm_head.weight"], "_forward_module.actor."),
    ],
)
def test_actor_prefix(keys, prefix):
    assert _actor_prefix(dict.fromkeys(keys)) == prefix


def test_no_actor_in_state_dict_is_an_error():
    with pytest.raises(KeyError, match="no actor"):
        _actor_prefix({"critic.x": 1})


def test_fsdp_on_cpu_falls_back_to_ddp_and_says_so(model, tmp_path, caplog, monkeypatch):
    from agentfly.config import load_config
    from agentfly.fit import build_trainer

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    data = tmp_path / "train.json"
    data.write_text('[{"question": "1+1?", "answer": "2"}]')
    cfg = load_config([
        f"data.train_files={data}", "data.train_batch_size=1", f"actor_rollout_ref.model.path={model}",
        "algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.ppo_mini_batch_size=1",
        "actor_rollout_ref.actor.strategy=fsdp", "trainer.device=cpu", "trainer.n_gpus_per_node=1",
        f"trainer.default_local_dir={tmp_path / 'run'}", "actor_rollout_ref.rollout.num_engines=0",
        "trainer.logger=[csv]",
    ])
    with caplog.at_level(logging.WARNING, logger="agentfly.fit"):
        trainer, *_ = build_trainer(cfg)
    assert any("FSDP needs GPUs" in r.getMessage() for r in caplog.records)
    assert type(trainer.strategy).__name__ != "FSDPStrategy"


@pytest.mark.gpu
def test_fsdp_fit_on_one_gpu_syncs_full_weights(model, tmp_path):
    """One GPU, FSDP: an iteration trains, the engine gets the gathered actor, the HF export loads."""
    import json

    from safetensors.torch import load_file

    from agentfly.cli import main

    rows = [{"question": f"What is {a}+{b}?", "answer": str(a + b)} for a, b in [(1, 2), (3, 4)]]
    (tmp_path / "train.json").write_text(json.dumps(rows))
    run = tmp_path / "run"
    args = [
        "fit", f"data.train_files={tmp_path / 'train.json'}", "data.train_batch_size=2",
        f"actor_rollout_ref.model.path={model}", "agent.init_config.tools=[calculator,answer]",
        "agent.init_config.template=qwen2.5", "agent.init_config.reward_name=math_equal_reward_tool",
        "agent.run_config.num_chains=2", "agent.run_config.generation_config.max_tokens=12",
        "algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.strategy=fsdp", "actor_rollout_ref.actor.fsdp_config.param_offload=true",
        "actor_rollout_ref.actor.use_kl_loss=true", "actor_rollout_ref.rollout.num_engines=0",
        "trainer.device=cuda", "trainer.n_gpus_per_node=1", "trainer.logger=[csv]",
        "trainer.total_training_steps=1", f"trainer.default_local_dir={run}",
    ]
    assert main(args) == 0
    before, after = load_file(model / "model.safetensors"), load_file(run / "hf_actor" / "model.safetensors")
    assert set(before) == set(after)
    assert any(not torch.equal(before[k], after[k].to(before[k].dtype)) for k in before)
