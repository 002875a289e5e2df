"""The transformers engine's prefix cache holds no memory the update needs: an in-process engine on
the trainer's device frees it as a ``sync`` update starts (and serves exactly after), engines that
do not share the trainer's memory keep it within ``prefix_cache_max_gib``, and a budget that
bounds nothing is refused when the config is composed."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from lightning.pytorch.callbacks import Callback

from agentfly.models.tiny import build_tiny_model
from agentfly.rollout.engines import SamplingParams
from agentfly.rollout.engines.caller_thread import run_sync
from agentfly.rollout.engines.pool import EnginePool
from agentfly.rollout.engines.transformers_engine import TransformersEngine
from tests.config.cases import BASE, error_of

KEY = "actor_rollout_ref.rollout.prefix_cache_max_gib"
CUDA = torch.cuda.is_available()
PROMPT = "<|im_start|>system\nYou are a careful agent. Think, then act.<|im_end|>\n<|im_start|>user\nGo.<|im_end|>\n"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_model(
        tmp_path_factory.mktemp("memory"), hidden_size=128, head_dim=32, initializer_range=0.2
    )


@pytest.mark.parametrize("value", ["0", "-1", "inf", "nan", "lots"])
def test_a_budget_that_bounds_nothing_is_refused_when_composed(value):
    said = error_of([*BASE, f"{KEY}={value}"])
    assert KEY in said


def cache_bytes(pool: EnginePool) -> int:
    return pool.stats()[0]["prefix_cache_bytes"]


def filled_pool(model_dir) -> EnginePool:
    """An in-process engine on the CPU whose store holds a generated sequence's blocks."""
    pool = EnginePool("transformers", 0, engine_kwargs={"model": str(model_dir), "device": "cpu"})
    prompt = pool.tokenizer.encode(PROMPT)
    run_sync(
        pool, pool.generate([prompt], SamplingParams(temperature=0, max_tokens=20, ignore_eos=True))
    )
    assert cache_bytes(pool) > 0
    return pool


@pytest.mark.parametrize(
    ("rollout_mode", "trainer_device", "freed"),
    [
        ("sync", "cpu", True),  # the rollout is over and the update runs on the engine's device
        ("one_step_off", "cpu", False),  # the next rollout runs beside the update and uses it
        ("async", "cpu", False),
        ("sync", "meta", False),  # the update runs on another device
    ],
)
def test_the_update_frees_the_store_only_on_the_trainer_s_device_after_a_sync_rollout(
    model_dir, rollout_mode, trainer_device, freed
):
    from agentfly.callbacks.weight_sync import WeightSyncCallback

    pool = filled_pool(model_dir)
    held = cache_bytes(pool)
    session = SimpleNamespace(pool=pool)
    trainer = SimpleNamespace(
        datamodule=SimpleNamespace(session=session, rollout_mode=rollout_mode)
    )
    module = SimpleNamespace(device=torch.device(trainer_device))
    WeightSyncCallback().on_train_batch_start(trainer, module, None, 0)
    assert cache_bytes(pool) == (0 if freed else held)
    pool.shutdown()


class CacheProbe(Callback):
    """The engine's prefix-cache bytes as the batch reaches the update (before agentfly's own
    callbacks see it) and at each backward pass of the update."""

    def __init__(self) -> None:
        self.handed_over: list[int] = []
        self.in_backward: list[int] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.handed_over.append(cache_bytes(trainer.datamodule.session.pool))

    def on_before_backward(self, trainer, pl_module, loss) -> None:
        self.in_backward.append(cache_bytes(trainer.datamodule.session.pool))


@pytest.mark.parametrize(
    "device",
    ["cpu", pytest.param("gpu", marks=pytest.mark.skipif(not CUDA, reason="needs a CUDA device"))],
)
def test_a_fit_s_update_runs_with_the_in_process_engine_s_store_empty_and_serves_exactly_after(
    tmp_path, model_dir, device
):
    """One iteration of a fit whose engine lives in the training process (on the CPU, or on the
    trainer's GPU, in float32 on both): the store the rollout filled is empty in every backward
    pass of the update, and afterwards the engine serves a two-turn chain as an engine without
    the cache serves it with the actor's weights, reusing its first turn."""
    from agentfly.cli import load_config
    from agentfly.run.fit import build_trainer

    rows = [{"question": f"What is {a}*{a}?", "answer": str(a * a)} for a in range(2, 6)]
    (tmp_path / "train.json").write_text(json.dumps(rows))
    cfg = load_config(
        [
            f"data.train_files={tmp_path / 'train.json'}",
            "data.train_batch_size=2",
            f"agent.init_config.model_name_or_path={model_dir}",
            "agent.init_config.template=qwen2.5",
            "agent.init_config.tools=[calculator]",
            "agent.init_config.reward_name=math_equal_reward_tool",
            "agent.init_config.max_model_len=1024",
            "agent.run_config.num_chains=2",
            "agent.run_config.max_turns=1",
            "agent.run_config.generation_config.max_tokens=8",
            "algorithm.adv_estimator=grpo",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.actor.optim.lr=5e-2",
            "actor_rollout_ref.actor.use_kl_loss=False",
            "actor_rollout_ref.rollout.name=transformers",
            "actor_rollout_ref.rollout.num_engines=0",
            "trainer.n_gpus_per_node=1",
            f"trainer.device={device}",
            "actor_rollout_ref.rollout.dtype=float32",
            "trainer.total_training_steps=1",
            "trainer.logger=[csv]",
            f"trainer.default_local_dir={tmp_path / 'run'}",
        ]
    )
    trainer, module, dm, _ = build_trainer(cfg)
    probe = CacheProbe()
    trainer.callbacks.insert(0, probe)
    try:
        trainer.fit(module, datamodule=dm)
        pool = dm.session.pool
        greedy = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
        prompt = pool.tokenizer.encode(PROMPT)
        first = run_sync(pool, pool.generate([prompt], greedy))[0][0]
        reused = pool.stats()[0]["reused_tokens"]
        second_prompt = prompt + first.token_ids + pool.tokenizer.encode("\nobservation")
        second = run_sync(pool, pool.generate([second_prompt], greedy))[0][0]
        reused = pool.stats()[0]["reused_tokens"] - reused
    finally:
        dm.close()
    assert probe.handed_over and probe.handed_over[0] > 0  # the rollout left K/V in the store
    assert probe.in_backward and set(probe.in_backward) == {0}

    # the engine after it serves what an engine without the cache serves, with the actor's weights
    engine_device = "cuda" if device == "gpu" else "cpu"
    reference = TransformersEngine(model_dir, device=engine_device, enable_prefix_caching=False)
    reference.load_weights(module.actor.state_dict())
    expected_first = reference.generate([prompt], greedy)[0][0]
    expected_second = reference.generate([second_prompt], greedy)[0][0]
    assert first.token_ids == expected_first.token_ids
    assert second.token_ids == expected_second.token_ids
    assert torch.allclose(
        torch.tensor(second.logprobs), torch.tensor(expected_second.logprobs), atol=1e-4
    )
    assert reused > 0  # the second turn reused the first's K/V


@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
def test_on_cuda_the_freed_store_returns_its_memory_to_the_trainer_s_allocator(model_dir):
    """The bytes the store held leave ``torch.cuda.memory_allocated`` (the allocator the trainer
    in the same process allocates from): each block's allocation rounded up to 512 bytes."""
    pool = EnginePool("transformers", 0, engine_kwargs={"model": str(model_dir), "device": "cuda"})
    prompt = pool.tokenizer.encode(PROMPT)
    run_sync(
        pool, pool.generate([prompt], SamplingParams(temperature=0, max_tokens=20, ignore_eos=True))
    )
    stats = pool.stats()[0]
    assert stats["prefix_cache_bytes"] > 0
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    assert pool.shares_device(torch.device("cuda", torch.cuda.current_device()))
    pool.free_prefix_cache()
    torch.cuda.synchronize()
    dropped = before - torch.cuda.memory_allocated()
    assert (
        stats["prefix_cache_bytes"]
        <= dropped
        <= stats["prefix_cache_bytes"] + 512 * stats["prefix_cache_blocks"]
    )
    pool.shutdown()
