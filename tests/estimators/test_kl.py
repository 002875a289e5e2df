"""KL penalties and controllers against hand values and independent formulas."""

from __future__ import annotations

import math

import pytest
import torch

from agentfly.estimators import (
    AdaptiveKLController,
    FixedKLController,
    get_kl_controller,
    kl_penalty,
)
from agentfly.estimators.kl import full_kl_from_logits

D = torch.float64


def test_sampled_kinds_by_hand():
    lp, rp = torch.tensor([-1.0], dtype=D), torch.tensor([-2.0], dtype=D)
    assert kl_penalty(lp, rp, "kl").item() == pytest.approx(1.0)
    assert kl_penalty(lp, rp, "k1").item() == pytest.approx(1.0)
    assert kl_penalty(rp, lp, "abs").item() == pytest.approx(1.0)
    assert kl_penalty(lp, rp, "mse").item() == pytest.approx(0.5)
    assert kl_penalty(lp, rp, "k2").item() == pytest.approx(0.5)
    # k3: r = q/p = e^{-1}; r - log r - 1 = e^{-1} + 1 - 1
    assert kl_penalty(lp, rp, "low_var_kl").item() == pytest.approx(math.exp(-1))
    assert kl_penalty(lp, rp, "k3").item() == pytest.approx(math.exp(-1))


def test_low_var_kl_is_clamped_as_in_verl():
    lp, rp = torch.tensor([0.0], dtype=D), torch.tensor([30.0], dtype=D)
    # log-ratio clamped to 20 -> e^20 - 21, then clamped to 10
    assert kl_penalty(lp, rp, "k3").item() == 10.0


@pytest.mark.parametrize("kind", ["k1+", "k3+", "kl+", "low_var_kl+", "abs+"])
def test_straight_through_value_of_named_gradient_of_k2(kind):
    lp = torch.tensor([-0.3, -1.2, -2.0], dtype=D, requires_grad=True)
    rp = torch.tensor([-0.5, -0.7, -2.5], dtype=D)
    out = kl_penalty(lp, rp, kind)
    assert torch.allclose(out, kl_penalty(lp.detach(), rp, kind[:-1]))
    out.sum().backward()
    assert torch.allclose(lp.grad, (lp - rp).detach())  # d/dlp of ½(lp - rp)²


def test_full_kl_matches_the_definition_and_sampled_average():
    g = torch.Generator().manual_seed(0)
    logits_p = torch.randn(2, 3, 7, generator=g, dtype=D)
    logits_q = torch.randn(2, 3, 7, generator=g, dtype=D)
    lp, lq = logits_p.log_softmax(-1), logits_q.log_softmax(-1)
    out = kl_penalty(lp, lq, "full")
    assert out.shape == (2, 3)
    by_hand = torch.zeros(2, 3, dtype=D)
    for b in range(2):
        for s in range(3):
            by_hand[b, s] = sum(math.exp(lp[b, s, v]) * (lp[b, s, v] - lq[b, s, v]) for v in range(7))
    assert torch.allclose(out, by_hand)
    assert torch.all(out >= 0)
    # the k1 and k3 estimators are unbiased: their mean under p approaches the full KL
    p = lp[0, 0].exp()
    samples = torch.multinomial(p, 200_000, replacement=True, generator=g)
    for kind in ("k1", "k3"):
        est = kl_penalty(lp[0, 0][samples], lq[0, 0][samples], kind).mean()
        assert est.item() == pytest.approx(out[0, 0].item(), abs=0.02)


@pytest.mark.parametrize("chunk", [1, 4, 1000])
def test_full_kl_from_logits_chunk_by_chunk_equals_the_definition(chunk):
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(2, 5, 11, generator=g, dtype=D, requires_grad=True)
    ref_logits = 3 * torch.randn(2, 5, 11, generator=g, dtype=D)
    out = full_kl_from_logits(logits, ref_logits, chunk_size=chunk)
    p, q = logits.softmax(-1), ref_logits.softmax(-1)
    by_hand = (p * (p.log() - q.log())).sum(-1)  # (2, 5)
    assert out.shape == (2, 5)
    assert torch.allclose(out, by_hand)
    # differentiable: the gradient is the definition's
    weights = torch.randn(2, 5, generator=g, dtype=D)
    (grad,) = torch.autograd.grad((out * weights).sum(), logits)
    (expected,) = torch.autograd.grad((by_hand * weights).sum(), logits)
    assert torch.allclose(grad, expected)
    assert full_kl_from_logits(logits[:, :0], ref_logits[:, :0]).shape == (2, 0)
    with pytest.raises(ValueError, match="same shape"):
        full_kl_from_logits(logits, ref_logits[..., :3])


def test_full_needs_rows_and_unknown_kind_lists_kinds():
    with pytest.raises(ValueError, match="full log-probability rows"):
        kl_penalty(torch.zeros(2, 3), torch.zeros(2, 3), "full")
    with pytest.raises(ValueError, match="low_var_kl"):
        kl_penalty(torch.zeros(2), torch.zeros(2), "k4")


def test_adaptive_controller_update_by_hand():
    ctl = AdaptiveKLController(init_kl_coef=0.1, target_kl=0.1, horizon=100)
    # error = 0.15/0.1 - 1 = 0.5 -> clipped to 0.2; mult = 1 + 0.2 * 10 / 100 = 1.02
    ctl.update(current_kl=0.15, n_steps=10)
    assert ctl.value == pytest.approx(0.102)
    # error = 0.09/0.1 - 1 = -0.1; mult = 1 - 0.1 * 10 / 100 = 0.99
    ctl.update(current_kl=0.09, n_steps=10)
    assert ctl.value == pytest.approx(0.102 * 0.99)


def test_controller_state_round_trip_continues_identically():
    a = get_kl_controller("adaptive", kl_coef=0.05, target_kl=0.02, horizon=50)
    for kl in (0.01, 0.03, 0.05):
        a.update(kl, 4)
    b = get_kl_controller("adaptive", kl_coef=123.0, target_kl=9.0, horizon=1)
    b.load_state_dict(a.state_dict())
    for kl in (0.02, 0.0, 0.1):
        a.update(kl, 4)
        b.update(kl, 4)
        assert a.value == b.value


def test_fixed_controller_does_not_move():
    ctl = FixedKLController(0.3)
    ctl.update(5.0, 100)
    assert ctl.value == 0.3
    with pytest.raises(ValueError, match="adaptive, fixed"):
        get_kl_controller("pid")
