"""One update of ``AgentRLModule`` on a hand-made batch, and what the tests compare it with.

The batch: two prompts, two chains each, built as ``Trajectory`` objects (two sampled turns with
an observation between them, or one turn) and collated by ``collate_trajectories``; the
references are plain forward passes over each unpadded chain (:func:`chain_logprobs`...), and
the hand-known advantages (GRPO on rewards (1, 0) and (0, 1): ±1/√2).
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader

from agentfly.core.batch import RolloutBatch
from agentfly.core.trajectory import Trajectory
from agentfly.modules.rl_module import AgentRLModule
from agentfly.modules.settings import (
    KLSettings,
    LoraSettings,
    ModelSettings,
    OptimizerSettings,
    PolicyLossSettings,
    UpdateSettings,
)
from agentfly.rollout.collate import collate_trajectories

# (group, prompt ids, [(ids, sampled?)...], reward). Prompts of two lengths (left padding),
# responses of four (right padding); observations (sampled? False) between the sampled turns.
CHAINS = [
    (0, [5, 6, 7, 8], [([20, 21, 22], True), ([30, 31], False), ([23, 24], True)], 1.0),
    (0, [5, 6, 7, 8], [([40, 41, 42, 43], True)], 0.0),
    (1, [9, 10, 11], [([50, 51], True), ([60, 61, 62], False), ([52], True)], 0.0),
    (1, [9, 10, 11], [([70, 71, 72], True)], 1.0),
]
# GRPO on rewards (1, 0) and (0, 1): (r - 1/2) / (std + 1e-6), the unbiased std being 1/√2
GRPO_ADVANTAGES = [(r - 0.5) / (math.sqrt(0.5) + 1e-6) for *_, r in CHAINS]
EQUAL_REWARDS = [(g, p, segs, 1.0) for g, p, segs, _ in CHAINS]  # GRPO advantages all zero
PAD = 0
NO_CLIP = 1e9  # grad_clip that never clips


# ---------------------------------------------------------------- the batch and its references


def response_tokens(chain: tuple) -> tuple[list[int], list[bool]]:
    """The chain's response ids and which of them were sampled, from the spec above."""
    ids = [i for seg, _ in chain[2] for i in seg]
    sampled = [s for seg, s in chain[2] for _ in seg]
    return ids, sampled


def make_batch(chains: list[tuple] = CHAINS) -> RolloutBatch:
    """Collate the chains through ``Trajectory`` (sampled turns and observations appended in
    order). The engine's log-probabilities are left at 0: the module computes its own."""
    trajs = []
    for group, prompt, segments, reward in chains:
        traj = Trajectory(prompt_ids=list(prompt), group_id=group, reward=reward)
        for ids, sampled in segments:
            if sampled:
                traj.append_sampled(ids, [0.0] * len(ids))
            else:
                traj.append_observation(ids)
        trajs.append(traj)
    return collate_trajectories(trajs, PAD)


@torch.no_grad()
def chain_logprobs(model: Any, chains: list[tuple] = CHAINS) -> list[torch.Tensor]:
    """Teacher-forced log p of every response token, one plain forward per unpadded chain."""
    out = []
    for chain, rows in zip(chains, chain_log_softmax(model, chains), strict=True):
        ids, _ = response_tokens(chain)
        out.append(rows.gather(-1, torch.tensor(ids).unsqueeze(-1)).squeeze(-1))  # (R,)
    return out


@torch.no_grad()
def chain_log_softmax(model: Any, chains: list[tuple] = CHAINS) -> list[torch.Tensor]:
    """Full log-softmax rows (R, V) predicting each response token, per unpadded chain."""
    out = []
    for chain in chains:
        prompt, (ids, _) = chain[1], response_tokens(chain)
        logits = model(input_ids=torch.tensor([prompt + ids])).logits[0].float()  # (L, V)
        out.append(logits[len(prompt) - 1 : -1].log_softmax(-1))  # position P-1+t predicts t
    return out


@torch.no_grad()
def chain_values(critic: Any, chains: list[tuple] = CHAINS) -> list[torch.Tensor]:
    """The critic's value at the position predicting each response token, per unpadded chain."""
    out = []
    for chain in chains:
        prompt, (ids, _) = chain[1], response_tokens(chain)
        v = critic(input_ids=torch.tensor([prompt + ids])).logits[0, :, 0].float()  # (L,)
        out.append(v[len(prompt) - 1 : -1])
    return out


def sampled_mask(n: int, chains: list[tuple] = CHAINS) -> torch.Tensor:
    return torch.tensor(response_tokens(chains[n])[1])


def load_actor(path: Path) -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


# ---------------------------------------------------------------- one update, by hand


class RecordingOptimizer:
    """Stands for the optimizer of ``AgentRLModule._update``: records the gradient at each step."""

    def __init__(self, model: Any) -> None:
        self.model, self.grads = model, []

    def zero_grad(self) -> None:
        self.model.zero_grad(set_to_none=True)

    def step(self) -> None:
        self.grads.append({k: p.grad.clone() for k, p in self.model.named_parameters()})


class NoScheduler:
    def step(self) -> None:
        pass

    def get_last_lr(self) -> list[float]:
        return [0.0]


# ---------------------------------------------------------------- one fit on the batch


class Perturb(pl.Callback):
    """Moves the actor away from the reference before the update (seeded Gaussian noise) and
    records its log-probabilities there: the behaviour policy of the batch."""

    def __init__(self, scale: float = 0.05) -> None:
        self.scale = scale
        self.logprobs: list[torch.Tensor] = []
        self.rows: list[torch.Tensor] = []

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        g = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for p in pl_module.actor.parameters():
                p.add_(self.scale * torch.randn(p.shape, generator=g))
        self.logprobs = chain_logprobs(pl_module.actor)
        self.rows = chain_log_softmax(pl_module.actor)


class ValuesBefore(pl.Callback):
    """The critic's values on the chains when training starts (its head is initialised at load)."""

    values: list[torch.Tensor]

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        self.values = chain_values(pl_module.critic)


class GradProbe(pl.Callback):
    """The actor's gradient at each of its optimizer steps (after clipping, before the step)."""

    def __init__(self) -> None:
        self.grads: list[dict[str, torch.Tensor]] = []

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        actor = dict(pl_module.actor.named_parameters())
        if optimizer.param_groups[0]["params"][0] is next(iter(actor.values())):
            self.grads.append(
                {k: p.grad.detach().clone() for k, p in actor.items() if p.grad is not None}
            )


def fit_once(
    model_path: Path, batch: RolloutBatch, callbacks: list[Any], lora: LoraSettings | None = None,
    **groups: Any,
) -> tuple[Any, dict[str, float]]:
    """One ``training_step`` of ``AgentRLModule`` on ``batch`` by a Lightning Trainer on the CPU;
    returns the module and the metrics it logged. The module's settings groups are these, but
    for ``groups``: one mini-batch (the batch), AdamW at lr 1e-3 without weight decay, no entropy
    bonus, no KL term; the policy has the adapter ``lora`` (none by default)."""
    settings: dict[str, Any] = dict(
        actor=UpdateSettings("actor", mini_batch_size=len(batch)),
        actor_optim=OptimizerSettings(lr=1e-3, weight_decay=0.0),
        policy_loss=PolicyLossSettings(entropy_coeff=0.0),
        kl=KLSettings(use_kl_loss=False),
    )
    settings.update(groups)
    torch.manual_seed(0)  # the critic's value head is initialised when the module loads it
    module = AgentRLModule(ModelSettings(str(model_path), lora=lora or LoraSettings()), **settings)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=1,
        logger=False,
        callbacks=callbacks,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
    )
    loader = DataLoader([batch], batch_size=None, collate_fn=lambda b: b)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # num_workers, modules in eval mode
        trainer.fit(module, train_dataloaders=loader)
    assert module.iteration == 1
    return module, {k: float(v) for k, v in trainer.callback_metrics.items()}
