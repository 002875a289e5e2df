"""The SFT module's loss: the mean negative log-likelihood of the assistant's tokens (a plain forward
over each unpadded example, by hand), the same whatever the micro-batches, and falling when the
same batch is trained on again and again."""

from __future__ import annotations

import math
import warnings

import lightning.pytorch as pl
import pytest
import torch
from torch.utils.data import DataLoader

from agentfly.core.trajectory import Trajectory
from agentfly.modules.policy_model import build_policy_model
from agentfly.modules.settings import LoraSettings, ModelSettings, OptimizerSettings, UpdateSettings
from agentfly.modules.sft_module import AgentSFTModule
from agentfly.rollout.collate import collate_trajectories

# (prompt ids, [(ids, assistant?)...]): prompts of two lengths, a turn, an observation, a turn
EXAMPLES = [
    ([5, 6, 7, 8], [([20, 21, 22], True), ([30, 31], False), ([23, 24], True)]),
    ([9, 10, 11], [([40, 41, 42, 43], True)]),
    ([12, 13], [([50, 51], True), ([60, 61, 62], False), ([52], True)]),
]


def batch_of(examples=EXAMPLES):
    trajs = []
    for prompt, turns in examples:
        t = Trajectory(prompt_ids=list(prompt))
        for ids, assistant in turns:
            if assistant:
                t.append_sampled(ids, [0.0] * len(ids))
            else:
                t.append_observation(ids)
        trajs.append(t)
    return collate_trajectories(trajs, pad_id=0)


@torch.no_grad()
def nll_by_hand(model, examples=EXAMPLES) -> float:
    """Σ −log p over the assistant tokens / their count, one forward per unpadded example."""
    total, count = 0.0, 0
    for prompt, turns in examples:
        ids = [i for seg, _ in turns for i in seg]
        assistant = [a for seg, a in turns for _ in seg]
        logp = model(input_ids=torch.tensor([prompt + ids])).logits[0].float().log_softmax(-1)  # (L, V)
        for t, (token, a) in enumerate(zip(ids, assistant, strict=True)):
            if a:
                total -= float(logp[len(prompt) - 1 + t, token])  # position P-1+t predicts token t
                count += 1
    return total / count


class Record(pl.Callback):
    """Each step's logged loss, and the gradients each optimizer step takes."""

    def __init__(self) -> None:
        self.losses: list[float] = []
        self.grads: list[list[torch.Tensor]] = []

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        self.grads.append([p.grad.detach().clone() for p in pl_module.actor.parameters() if p.grad is not None])
        self.optimized = [p for group in optimizer.param_groups for p in group["params"]]

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.losses.append(float(trainer.callback_metrics["train/loss"]))


def train(model_path, batch, steps, micro=None, lr=1e-3, lora=None, keep=None):
    """``steps`` optimizer steps of the SFT module on ``batch``; the losses and gradients
    (``keep``: a dict that receives the module)."""
    module = AgentSFTModule(
        ModelSettings(str(model_path), lora=lora or LoraSettings()),
        update=UpdateSettings("actor", mini_batch_size=len(batch), micro_batch_size=micro, grad_clip=1e9),
        optim=OptimizerSettings(lr=lr, weight_decay=0.0),
    )
    record = Record()
    trainer = pl.Trainer(
        accelerator="cpu", devices=1, max_epochs=1, logger=False, callbacks=[record],
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        num_sanity_val_steps=0, limit_val_batches=0,
    )
    loader = DataLoader([batch] * steps, batch_size=None, collate_fn=lambda b: b)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # num_workers
        trainer.fit(module, train_dataloaders=loader)
    assert module.iteration == steps
    if keep is not None:
        keep["module"] = module
    return record


def test_the_loss_is_the_mean_nll_of_the_assistant_tokens(tiny_model_dir):
    batch = batch_of()
    expected = nll_by_hand(build_policy_model(ModelSettings(str(tiny_model_dir))))
    whole = train(tiny_model_dir, batch, 1)
    assert whole.losses[0] == pytest.approx(expected, rel=1e-5)
    # micro-batches of one accumulate to the same step: the same loss, the same gradient
    split = train(tiny_model_dir, batch, 1, micro=1)
    assert split.losses[0] == pytest.approx(expected, rel=1e-5)
    for a, b in zip(whole.grads[0], split.grads[0], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)


def test_the_loss_falls_on_a_fixed_batch(tiny_model_dir):
    losses = train(tiny_model_dir, batch_of(), 12, lr=1e-2).losses
    assert all(math.isfinite(x) for x in losses)
    assert losses[-1] < 0.5 * losses[0], losses


def test_with_lora_only_the_adapter_trains_and_a_checkpoint_holds_it(tiny_model_dir):
    """``actor_rollout_ref.model.lora.rank`` in agentfly sft: the base stays as loaded, the
    optimizer holds the adapter's parameters only, the loss still falls, and the checkpoint
    keeps the adapter (the base is the model at its path)."""
    keep: dict = {}
    record = train(tiny_model_dir, batch_of(), 12, lr=1e-2, lora=LoraSettings(rank=8, alpha=16), keep=keep)
    actor = keep["module"].actor
    adapter = {id(p) for n, p in actor.named_parameters() if "lora_" in n}
    assert adapter and {id(p) for p in record.optimized} == adapter
    frozen = {  # peft's names: base_model.model.<name>, the adapted layers' as ...base_layer.weight
        n.removeprefix("base_model.model.").replace(".base_layer.", "."): p
        for n, p in actor.named_parameters() if "lora_" not in n
    }
    base = dict(build_policy_model(ModelSettings(str(tiny_model_dir))).named_parameters())
    assert frozen.keys() == base.keys()
    for name, p in base.items():
        torch.testing.assert_close(frozen[name], p, rtol=0, atol=0)
    assert record.losses[-1] < 0.85 * record.losses[0], record.losses
    checkpoint: dict = {"state_dict": {f"actor.{k}": v for k, v in actor.state_dict().items()}}
    keep["module"].on_save_checkpoint(checkpoint)
    saved = set(checkpoint["state_dict"])
    assert saved and all("lora_" in k for k in saved), sorted(saved)[:5]
