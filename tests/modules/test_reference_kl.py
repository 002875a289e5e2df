"""Every KL kind, in the reward and in the loss, from the module's own forward passes, against a
plain softmax of a plain forward of the tiny model (float64, written out by hand here).

The actor is moved away from the reference before the step, so every kind is non-zero. One
Lightning step runs the real ``training_step`` on a hand-made batch: the reward shaping is read
between the KL hook and the advantage hook, the KL loss from the logged metrics.
"""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch
from torch.utils.data import DataLoader

from agentfly.callbacks import AdvantageCallback, KLRewardCallback, RolloutBatchCallback
from agentfly.config.validate import _kl_kinds
from agentfly.core.batch import RolloutBatch
from agentfly.core.trajectory import Trajectory
from agentfly.models.tiny import build_tiny_model
from agentfly.modules.rl_module import AgentRLModule
from agentfly.modules.settings import (
    KLSettings,
    ModelSettings,
    OptimizerSettings,
    PolicyLossSettings,
    UpdateSettings,
)
from agentfly.rollout.collate import collate_trajectories

D = torch.float64
KL_COEF = 0.5


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("kl_model"), initializer_range=0.2)


def make_batch(vocab: int) -> RolloutBatch:
    """Two prompts of different lengths x 2 chains; one chain per prompt has a tool observation
    between two turns (mask holes), the other one turn of another length (padding)."""
    g = torch.Generator().manual_seed(0)

    def ids(n: int) -> list[int]:
        return torch.randint(3, vocab, (n,), generator=g).tolist()

    trajs = []
    for group, prompt_len in enumerate((6, 4)):
        prompt = ids(prompt_len)
        for chain, turns in enumerate(((3, 2, 2), (5,))):
            t = Trajectory(prompt_ids=prompt, group_id=group, chain_index=chain)
            t.reward = 0.25 + group + chain
            t.append_sampled(ids(turns[0]), [0.0] * turns[0])
            if len(turns) > 1:
                t.append_observation(ids(turns[1]))
                t.append_sampled(ids(turns[2]), [0.0] * turns[2])
            trajs.append(t)
    return collate_trajectories(trajs, pad_id=0)


def plain_rows(model, batch) -> torch.Tensor:
    """log softmax of a plain full-sequence forward at the positions predicting the response."""
    p, t = batch.prompt_length, batch.response_length
    with torch.no_grad():
        logits = model(**batch.model_inputs(), use_cache=False).logits
    return logits[:, p - 1 : p - 1 + t].to(D).log_softmax(-1)  # (B, T, V)


def by_hand(kind: str, lp: torch.Tensor, lq: torch.Tensor, rows) -> torch.Tensor:
    """The KL kinds written out (Schulman's k1/k2/k3, |k1|, the exact sum); (B, T)."""
    base = kind.rstrip("+")
    if base == "full":
        p, q = rows
        return (p.exp() * (p - q)).sum(-1)
    x = lp - lq  # log p/q at the sampled token
    if base in ("kl", "k1"):
        return x
    if base == "abs":
        return x.abs()
    if base in ("mse", "k2"):
        return x * x / 2
    assert base in ("low_var_kl", "k3")
    return (torch.exp(-x) + x - 1).clamp(max=10)


def module_for(
    model_path, kind: str, micro: int | None, loss_kind: str | None = None
) -> AgentRLModule:
    module = AgentRLModule(
        ModelSettings(str(model_path)),
        actor=UpdateSettings("actor", mini_batch_size=4, micro_batch_size=micro),
        actor_optim=OptimizerSettings(lr=0.0),
        policy_loss=PolicyLossSettings(entropy_coeff=0.0),
        kl=KLSettings(
            use_kl_loss=True, kl_loss_type=loss_kind or kind, kl_loss_coef=0.1,
            use_kl_in_reward=True, kl_penalty=kind,
        ),
    )
    module.configure_model()
    with torch.no_grad():  # the actor moves away from the reference
        g = torch.Generator().manual_seed(1)
        for param in module.actor.parameters():
            param.add_(0.3 * param.std() * torch.randn(param.shape, generator=g))
    return module


class Record(RolloutBatchCallback):
    """A batch hook between the KL shaping (stage 0) and the advantages (stage 10)."""

    stage = 5

    def on_rollout_batch(self, trainer, pl_module, batch):
        self.rewards = batch.token_level_rewards.clone()
        self.full_kl = batch.full_kl
        return {}


def one_step(module, kind: str, batch) -> tuple[Record, dict[str, float]]:
    record = Record()
    trainer = pl.Trainer(
        accelerator="cpu", devices=1, max_epochs=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False,
        callbacks=[KLRewardCallback(kind, "fixed", KL_COEF), AdvantageCallback("grpo"), record],
    )
    loader = DataLoader([batch], batch_size=None, collate_fn=lambda b: b)
    trainer.fit(module, train_dataloaders=loader)
    return record, {k: float(v) for k, v in trainer.callback_metrics.items()}


def check_one_step(model_path, kind: str, loss_kind: str) -> None:
    module = module_for(model_path, kind, micro=None, loss_kind=loss_kind)
    batch = make_batch(module.actor.config.vocab_size)
    lp_rows, lq_rows = plain_rows(module.actor, batch), plain_rows(module.reference, batch)
    labels = batch.responses.unsqueeze(-1)
    lp, lq = lp_rows.gather(-1, labels)[..., 0], lq_rows.gather(-1, labels)[..., 0]  # (B, T)
    mask = batch.response_mask.to(D)
    kl = by_hand(kind, lp, lq, (lp_rows, lq_rows)) * mask
    kl_loss = by_hand(loss_kind, lp, lq, (lp_rows, lq_rows)) * mask
    assert (kl.abs().sum(-1) > 1e-3).all()  # the actor differs from the reference on every row

    record, metrics = one_step(module, kind, batch)

    scores = batch.token_level_scores.to(D)
    expected = scores - KL_COEF * kl  # the reward: every sampled token pays β·KL
    assert torch.allclose(record.rewards.to(D), expected, atol=1e-5)
    per_sequence = (kl.sum(-1) / mask.sum(-1)).mean().item()
    assert metrics["actor/reward_kl_penalty"] == pytest.approx(per_sequence, abs=1e-5)
    # the loss: token-mean over the (only) mini-batch, before its update
    token_mean = (kl_loss.sum() / mask.sum()).item()
    assert metrics["actor/kl_loss"] == pytest.approx(token_mean, rel=1e-4, abs=1e-6)


@pytest.mark.parametrize("kind", _kl_kinds())
def test_every_kind_in_the_reward_and_in_the_loss(model_path, kind):
    check_one_step(model_path, kind, kind)


@pytest.mark.parametrize(("kind", "loss_kind"), [("kl", "full"), ("full", "low_var_kl")])
def test_a_sampled_kind_and_full_side_by_side(model_path, kind, loss_kind):
    check_one_step(model_path, kind, loss_kind)


@pytest.mark.parametrize("micro", [None, 1, 3])
def test_full_kl_for_the_reward_equals_a_plain_softmax_in_any_micro_batches(model_path, micro):
    module = module_for(model_path, "full", micro)
    batch = make_batch(module.actor.config.vocab_size)
    old, ref, full_kl = module.full_kl_to_reference(batch)
    p, q = plain_rows(module.actor, batch), plain_rows(module.reference, batch)
    full = (p.exp() * (p - q)).sum(-1)  # Σ_v p(v) (log p(v) - log q(v)), (B, T)
    sampled = batch.response_mask.bool()
    assert full_kl.shape == sampled.shape
    assert torch.allclose(full_kl.to(D)[sampled], full[sampled], atol=1e-6, rtol=1e-4)
    assert full[sampled].min() > 1e-4
    labels = batch.responses.unsqueeze(-1)
    for got, rows in ((old, p), (ref, q)):
        picked = rows.gather(-1, labels)[..., 0]  # (B, T)
        assert torch.allclose(got.to(D)[sampled], picked[sampled], atol=1e-5)
