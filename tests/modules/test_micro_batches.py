"""Micro-batches by token budget: every row once, results in row order, and the update's
gradient that of one whole-batch pass (with and without packing)."""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch

from agentfly.modules.micro_batches import per_row, split, token_budget_groups
from agentfly.modules.rl_module import AgentRLModule
from agentfly.modules.settings import (
    CriticSettings,
    KLSettings,
    ModelSettings,
    PolicyLossSettings,
    UpdateSettings,
)
from tests.modules.one_update import GRPO_ADVANTAGES, NoScheduler, RecordingOptimizer, make_batch


@pytest.mark.parametrize("seed", range(20))
def test_every_row_once_and_within_the_budget(seed):
    rng = random.Random(seed)
    lengths = [rng.randint(1, 40) for _ in range(rng.randint(1, 30))]
    budget = rng.randint(10, 60)
    groups = token_budget_groups(lengths, budget)
    assert sorted(r for g in groups for r in g) == list(range(len(lengths)))
    for g in groups:
        assert sum(lengths[r] for r in g) <= budget or len(g) == 1


def test_a_row_longer_than_the_budget_gets_its_own_micro_batch():
    groups = token_budget_groups([3, 50, 4, 2], 10)
    assert [1] in groups and sorted(r for g in groups for r in g) == [0, 1, 2, 3]


def test_results_come_back_in_row_order():
    batch = make_batch()
    for tokens in (None, 6, 12, 15, 1000):
        assert sum(len(m) for m in split(batch, 2, tokens)) == len(batch)
        (ids,) = per_row(lambda m: (m.input_ids,), batch, 2, tokens)
        assert torch.equal(ids, batch.input_ids)
    # row lengths 11, 8, 9, 6: budget 15 pairs the two shortest-fitting rows out of order
    assert [len(m) for m in split(batch, None, 15)] == [1, 2, 1]


def _module(path: Any, *, remove_padding: bool = False, **update: Any) -> AgentRLModule:
    module = AgentRLModule(
        ModelSettings(str(path), remove_padding=remove_padding),
        actor=UpdateSettings("actor", mini_batch_size=4, grad_clip=1e9, **update),
        policy_loss=PolicyLossSettings(entropy_coeff=0.01),
        kl=KLSettings(use_kl_loss=False),
    )
    module.configure_model()
    module.manual_backward = lambda loss: loss.backward()  # type: ignore[method-assign]
    return module


def _gradient(module: AgentRLModule) -> dict[str, torch.Tensor]:
    """The actor's gradient of one mini-batch (the whole batch), ratios away from 1."""
    batch = make_batch()
    batch.advantages = torch.tensor(GRPO_ADVANTAGES)[:, None] * batch.response_mask
    with torch.no_grad():
        batch.old_log_probs = module.log_probs(module.actor, batch) - 0.1 * batch.response_mask
    opt = RecordingOptimizer(module.actor)
    module._update(module.actor, module.actor_settings, module._actor_loss, batch, opt, NoScheduler())
    (grads,) = opt.grads
    return grads


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
@pytest.mark.parametrize(
    "setting",
    [
        dict(max_token_len=15),
        dict(max_token_len=6),
        dict(remove_padding=True),
        dict(remove_padding=True, max_token_len=15),
    ],
)
def test_the_gradient_equals_one_whole_batch_pass(tiny_model_dir, mode, setting):
    whole = _gradient(_module(tiny_model_dir, loss_agg_mode=mode))
    split_grads = _gradient(_module(tiny_model_dir, loss_agg_mode=mode, **setting))
    for name, g in whole.items():
        assert (split_grads[name] - g).abs().max() <= 1e-5 * g.abs().max() + 1e-7, name


def test_no_grad_passes_by_tokens_equal_the_whole_batch(tiny_model_dir):
    batch = make_batch()
    whole = _module(tiny_model_dir)
    by_tokens = _module(tiny_model_dir, remove_padding=True, forward_max_token_len=12)
    mask = batch.attention_mask[:, batch.prompt_length :].bool()
    a = whole._no_grad_pass(lambda b: whole.log_probs(whole.actor, b), batch, None, None)
    s = by_tokens.actor_settings
    b = by_tokens._no_grad_pass(
        lambda m: by_tokens.log_probs(by_tokens.actor, m), batch, None, s.forward_max_token_len
    )
    assert torch.allclose(a[mask], b[mask], atol=1e-5)


def test_packed_critic_values_equal_the_padded_ones(tiny_model_dir):
    batch = make_batch()
    out = []
    for remove_padding in (False, True):
        module = AgentRLModule(
            ModelSettings(str(tiny_model_dir)),
            actor=UpdateSettings("actor", mini_batch_size=4),
            kl=KLSettings(use_kl_loss=False),
            critic=CriticSettings(
                str(tiny_model_dir), UpdateSettings("critic", 4), remove_padding=remove_padding
            ),
        )
        torch.manual_seed(0)  # the value head
        module.configure_model()
        out.append(module._no_grad_pass(module.values, batch, 1, None if remove_padding else 9))
    mask = batch.attention_mask[:, batch.prompt_length :].bool()
    assert torch.allclose(out[0][mask], out[1][mask], atol=1e-5)
