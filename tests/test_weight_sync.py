"""Weight sync is real: after an update, the engine's log-probabilities of a sequence equal the
actor's (and differ from the initial model's)."""

from __future__ import annotations

import json

import pytest
import torch

from agentfly.cli import load_config
from agentfly.models.tiny import build_tiny_model
from agentfly.rollout.engines import SamplingParams
from agentfly.rollout.engines.caller_thread import run_sync
from agentfly.run.fit import build_trainer


def teacher_forced(model, ids: list[int], n_new: int) -> torch.Tensor:
    with torch.no_grad():
        logp = model(torch.tensor([ids])).logits.float().log_softmax(-1)[0, :-1]  # (L-1, V)
    picked = logp.gather(-1, torch.tensor(ids[1:]).unsqueeze(-1)).squeeze(-1)
    return picked[-n_new:]


# The transformers engine only: the vLLM engine's reload of the same Hugging Face-named state
# dict (the tied embedding included) is checked against transformers in
# tests/rollout/test_vllm_engine.py (test_load_weights_follows_the_perturbed_model).
@pytest.mark.parametrize("engine", ["transformers"])
def test_engine_matches_the_actor_after_an_update(tmp_path, engine):
    from transformers import AutoModelForCausalLM

    model = build_tiny_model(tmp_path / "m", hidden_size=128, head_dim=32, initializer_range=0.2)
    rows = [{"question": f"What is {a}*{a}?", "answer": str(a * a)} for a in range(2, 6)]
    (tmp_path / "train.json").write_text(json.dumps(rows))
    cfg = load_config([
        f"data.train_files={tmp_path / 'train.json'}", "data.train_batch_size=2",
        f"agent.init_config.model_name_or_path={model}", "agent.init_config.template=qwen2.5",
        "agent.init_config.tools=[calculator]", "agent.init_config.reward_name=math_equal_reward_tool",
        "agent.init_config.max_model_len=1024",
        "agent.run_config.num_chains=2", "agent.run_config.max_turns=1",
        "agent.run_config.generation_config.max_tokens=8", "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.actor.optim.lr=5e-2",
        "actor_rollout_ref.actor.use_kl_loss=False", f"actor_rollout_ref.rollout.name={engine}",
        "actor_rollout_ref.rollout.num_engines=0", "trainer.n_gpus_per_node=1",
        "trainer.total_training_steps=1", "trainer.logger=[csv]", "trainer.val_before_train=False",
        f"trainer.default_local_dir={tmp_path / 'run'}",
    ])
    trainer, module, dm, _ = build_trainer(cfg)
    try:
        trainer.fit(module, datamodule=dm)
        tok = dm.session.tokenizer
        prompt = tok.encode("<|im_start|>user\nWhat is 7*7?<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
        pool = dm.session.pool
        (out,) = run_sync(pool, pool.generate([prompt], SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)))[0]
        seq, n = prompt + out.token_ids, len(out.token_ids)
        engine_lp = torch.tensor(out.logprobs)
        actor_lp = teacher_forced(module.actor.eval(), seq, n)
        initial = teacher_forced(AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval(), seq, n)
    finally:
        dm.close()
    assert module.iteration == 1
    gap = (engine_lp - actor_lp).abs().max().item()
    assert gap < 1e-4, gap
    assert (initial - actor_lp).abs().max().item() > 1e-3  # the update changed what the engine serves


class _Pool:
    def __init__(self) -> None:
        self.pushed: list[dict] = []
        self.versions: list[int | None] = []

    def update_weights(self, state: dict, version: int | None = None) -> None:
        self.pushed.append(state)
        self.versions.append(version)


class _Session:
    def __init__(self) -> None:
        self.pool = _Pool()


class _Module:
    def __init__(self) -> None:
        self.actor = torch.nn.Linear(2, 1)
        self.weights_version = 0

    def log(self, *args, **kwargs) -> None:
        pass


def test_the_engines_get_the_weights_whenever_theirs_are_another_version():
    """A new pool holds version 0 (the model at its path); each hook before a rollout pushes the
    actor's state exactly when the module's version differs from the one the engines hold."""
    from types import SimpleNamespace

    from agentfly.callbacks.weight_sync import WeightSyncCallback

    session, module = _Session(), _Module()
    trainer = SimpleNamespace(datamodule=SimpleNamespace(session=session), global_rank=0)
    sync = WeightSyncCallback()
    sync.on_validation_start(trainer, module)  # val_before_train on the base model
    sync.on_train_start(trainer, module)
    assert session.pool.pushed == []
    module.weights_version = 1  # an update (or a checkpoint load)
    sync.on_train_batch_end(trainer, module, None, None, 0)
    assert len(session.pool.pushed) == 1
    assert torch.equal(session.pool.pushed[0]["weight"], module.actor.weight)
    sync.on_validation_start(trainer, module)  # a validation in the middle of the fit
    sync.on_train_batch_end(trainer, module, None, None, 1)  # a critic warm-up iteration
    assert len(session.pool.pushed) == 1
    module.weights_version = 2  # e.g. `agentfly test` restored a checkpoint
    sync.on_test_start(trainer, module)
    assert len(session.pool.pushed) == 2
    trainer.datamodule.session = fresh = _Session()  # a new pool loads the model from its path
    sync.on_validation_start(trainer, module)
    assert len(fresh.pool.pushed) == 1
    trainer.datamodule.session = None  # no engines: nothing to do
    module.weights_version = 3
    sync.on_validation_start(trainer, module)
