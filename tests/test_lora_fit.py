"""LoRA end to end (`agentfly fit` on a tiny model, the transformers engine in the training
process): after each update the engine serves the adapted actor (its adapter, or with
``lora.merge=true`` its merged weights); checkpoints hold the adapter and its optimizer state
only, and a resume restores it; the Hugging Face export is the merged model or the adapter."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from agentfly.cli import load_config
from agentfly.rollout.engines import SamplingParams
from agentfly.rollout.engines.caller_thread import run_sync
from agentfly.run.fit import build_trainer
from tests.fit_runs import iterations_by_launch, rows, write_task

IDS = list(range(3, 40))  # a fixed token sequence to compare models on
PROMPT = "<|im_start|>user\nWhat is 7*7?<|im_end|>\n<|im_start|>assistant\n"
LORA = ["actor_rollout_ref.model.lora_rank=4", "actor_rollout_ref.model.lora_alpha=8",
        "actor_rollout_ref.model.target_modules=all-linear"]


def teacher_forced(model, ids: list[int], n_new: int) -> torch.Tensor:
    """log p of the last ``n_new`` tokens of ``ids`` under ``model``. (n_new,)"""
    with torch.no_grad():
        logp = model(torch.tensor([ids])).logits.float().log_softmax(-1)[0, :-1]  # (L-1, V)
    return logp.gather(-1, torch.tensor(ids[1:]).unsqueeze(-1)).squeeze(-1)[-n_new:]


def config(root, model, run, *extra):
    return load_config([
        f"data.train_files={root / 'train.json'}", "data.train_batch_size=2",
        f"agent.init_config.model_name_or_path={model}", "agent.init_config.template=qwen2.5",
        "agent.init_config.tools=[calculator]", "agent.init_config.reward_name=math_equal_reward_tool",
        "agent.init_config.max_model_len=1024", "agent.run_config.num_chains=2",
        "agent.run_config.max_turns=1", "agent.run_config.generation_config.max_tokens=8",
        "algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.optim.lr=5e-2", "actor_rollout_ref.actor.use_kl_loss=true",
        "actor_rollout_ref.actor.entropy_coeff=0.01",  # a gradient whatever the rewards
        "actor_rollout_ref.rollout.num_engines=0", "trainer.n_gpus_per_node=1", "trainer.logger=[csv]",
        "trainer.val_before_train=False", "trainer.save_freq=1", f"trainer.default_local_dir={run}",
        *LORA, *extra,
    ])


def fit(cfg):
    """Fit ``cfg``; returns the module and the engine's and the actor's log-probabilities of a
    greedy continuation of :data:`PROMPT`, and the base model's."""
    from peft import PeftModel

    trainer, module, dm, ckpt = build_trainer(cfg)  # ckpt: the one trainer.resume_mode=auto finds
    try:
        trainer.fit(module, datamodule=dm, ckpt_path=ckpt)
        prompt = dm.session.tokenizer.encode(PROMPT, add_special_tokens=False)
        pool = dm.session.pool
        (out,) = run_sync(pool, pool.generate([prompt], SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)))[0]
        seq, n = prompt + out.token_ids, len(out.token_ids)
        actor = module.actor.eval()
        assert isinstance(actor, PeftModel)
        with actor.disable_adapter():
            base = teacher_forced(actor, seq, n)
        return module, torch.tensor(out.logprobs), teacher_forced(actor, seq, n), base, seq, n
    finally:
        dm.close()


def kl_by_iteration(run) -> dict[int, float]:
    """The logged KL-to-reference loss of each iteration."""
    return {
        int(float(r["training/iteration"])): float(r["actor/kl_loss"])
        for r in rows(run) if r.get("actor/kl_loss") and r.get("training/iteration")
    }


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    root = tmp_path_factory.mktemp("lora")
    root, model = write_task(root, [(a, a) for a in range(2, 6)], hidden_size=128, head_dim=32)
    rows = [{"question": f"What is {a}*{a}?", "answer": str(a * a)} for a in range(2, 6)]
    (root / "train.json").write_text(json.dumps(rows))
    return root, model


@pytest.fixture(scope="module")
def adapter_run(task, tmp_path_factory):
    """Two iterations with the adapter sent to the engine, the adapter exported."""
    root, model = task
    run = tmp_path_factory.mktemp("adapter_run")
    cfg = config(root, model, run, "trainer.total_training_steps=2", "actor_rollout_ref.model.lora.export=adapter")
    return run, cfg, fit(cfg)


def test_the_engine_serves_the_adapter_after_each_update(adapter_run):
    _, _, (module, engine_lp, actor_lp, base_lp, _, _) = adapter_run
    assert module.iteration == 2
    assert (engine_lp - actor_lp).abs().max().item() < 1e-4
    assert (base_lp - actor_lp).abs().max().item() > 1e-3  # the adapter changed what is served


def test_merged_weights_reach_the_engine_with_merge(task, tmp_path):
    from transformers import AutoModelForCausalLM

    root, model = task
    cfg = config(root, model, tmp_path / "run", "trainer.total_training_steps=1", "actor_rollout_ref.model.lora.merge=true")
    module, engine_lp, actor_lp, base_lp, *_ = fit(cfg)
    assert (engine_lp - actor_lp).abs().max().item() < 1e-4
    assert (base_lp - actor_lp).abs().max().item() > 1e-3
    # the merged export (the default): a plain model computing what the adapted actor does
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "hf_actor", dtype=torch.float32).eval()
    gap = (teacher_forced(exported, IDS, 20) - teacher_forced(module.actor.eval(), IDS, 20)).abs().max().item()
    # W + s*B@A in one matrix sums in another order than W@x + s*B@(A@x): float32 rounding, up to
    # about 1e-5 in these log-probs (measured 1.05e-5 and 1.14e-5), against a gap
    # above 1e-3 for a merge that drops or misscales the adapter (base_lp above)
    assert gap < 1e-4


def test_checkpoints_hold_the_adapter_and_its_optimizer_state_only(adapter_run):
    run, _, (module, *_) = adapter_run
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)
    trainable = {f"actor.{k}" for k, p in module.actor.named_parameters() if p.requires_grad}
    assert trainable and set(ckpt["state_dict"]) == trainable  # no base weight, no reference
    assert all(".lora_A." in k or ".lora_B." in k for k in trainable)
    (actor_opt,) = ckpt["optimizer_states"]
    sizes = sorted(s["exp_avg"].numel() for s in actor_opt["state"].values())
    assert sizes == sorted(module.actor.get_parameter(k.removeprefix("actor.")).numel() for k in trainable)


def test_the_adapter_export_loads_over_the_base(adapter_run, task):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    run, _, (module, *_) = adapter_run
    _, model = task
    export = run / "hf_actor"
    assert (export / "adapter_config.json").is_file()
    assert not (export / "model.safetensors").exists()
    assert all("lora_" in k for k in load_file(export / "adapter_model.safetensors"))
    base = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    loaded = PeftModel.from_pretrained(base, export).eval()
    gap = (teacher_forced(loaded, IDS, 20) - teacher_forced(module.actor.eval(), IDS, 20)).abs().max().item()
    assert gap < 1e-5


def test_the_reference_is_the_base_and_a_resume_restores_the_adapter(adapter_run, task):
    """(Last: it writes iteration 3 into the shared run.) The KL to the reference is 0 at the first iteration (B = 0: the adapted actor is the
    base), not after. A third iteration resumed from iteration 2's checkpoint starts from its
    adapter (a KL above 0 at once) and the engine, synced when the fit starts, serves it."""
    run, _, _ = adapter_run
    root, model = task
    kl = kl_by_iteration(run)
    assert kl[1] == 0.0 and kl[2] > 0.0
    cfg = config(root, model, run, "trainer.total_training_steps=3", "actor_rollout_ref.model.lora.export=adapter")
    resumed, engine_lp, actor_lp, *_ = fit(cfg)
    assert resumed.iteration == 3
    assert iterations_by_launch(run)["2"] == [3.0]  # the second launch went on from iteration 2
    assert kl_by_iteration(run)[3] > 0.0  # a fresh adapter (B = 0) would give 0 here
    assert (engine_lp - actor_lp).abs().max().item() < 1e-4
