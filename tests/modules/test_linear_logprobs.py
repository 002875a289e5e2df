"""Chunked log-probs and entropy from hidden states equal the unchunked (B, T, V) path."""

from __future__ import annotations

import pytest
import torch

from agentfly.modules.linear_logprobs import linear_logprobs
from agentfly.modules.losses import entropy_from_logits, logprobs_from_logits


@pytest.mark.parametrize(("chunk", "temperature"), [(1, 1.0), (4, 0.7), (7, 1.0), (1000, 1.3)])
def test_values_and_gradients_equal_the_full_logits_path(chunk, temperature):
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(3, 5, 16, generator=g, dtype=torch.float64).float().requires_grad_()
    weight = torch.randn(50, 16, generator=g).requires_grad_()
    targets = torch.randint(0, 50, (3, 5), generator=g)
    w_logp, w_ent = torch.randn(3, 5, generator=g), torch.randn(3, 5, generator=g)

    logits = (hidden @ weight.T) / temperature  # (B, T, V)
    logp, ent = logprobs_from_logits(logits, targets), entropy_from_logits(logits)
    grads = torch.autograd.grad((logp * w_logp + ent * w_ent).sum(), (hidden, weight))

    c_logp, c_ent = linear_logprobs(hidden, weight, targets, temperature=temperature, chunk=chunk)
    c_grads = torch.autograd.grad((c_logp * w_logp + c_ent * w_ent).sum(), (hidden, weight))
    assert torch.allclose(c_logp, logp, atol=1e-5) and torch.allclose(c_ent, ent, atol=1e-5)
    for a, b in zip(c_grads, grads, strict=True):
        assert torch.allclose(a, b, atol=1e-5)


def test_only_log_probs_need_no_entropy_gradient():
    g = torch.Generator().manual_seed(1)
    hidden = torch.randn(6, 8, generator=g).requires_grad_()
    weight = torch.randn(20, 8, generator=g)
    targets = torch.randint(0, 20, (6,), generator=g)
    logp, _ = linear_logprobs(hidden, weight, targets, chunk=4)
    (grad,) = torch.autograd.grad(logp.sum(), hidden)
    expected = torch.autograd.grad(logprobs_from_logits(hidden @ weight.T, targets).sum(), hidden)[
        0
    ]
    assert torch.allclose(grad, expected, atol=1e-5)


def test_the_backward_recomputes_under_the_forwards_autocast():
    """bf16-mixed: the forward's logits are a bf16 matmul of bf16 hidden states and the fp32
    head; the backward recomputes them the same way (outside autocast a bf16 @ fp32 matmul
    raises), and the gradients are the logits path's under the same autocast, to bf16 rounding."""
    g = torch.Generator().manual_seed(2)
    hidden = torch.randn(12, 16, generator=g).bfloat16().requires_grad_()
    weight = torch.randn(40, 16, generator=g).requires_grad_()
    targets = torch.randint(0, 40, (12,), generator=g)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = (hidden @ weight.T).float()
        expected = torch.autograd.grad(logprobs_from_logits(logits, targets).sum(), (hidden, weight))
        logp, _ = linear_logprobs(hidden, weight, targets, chunk=5)
    grads = torch.autograd.grad(logp.sum(), (hidden, weight))
    assert grads[0].dtype == torch.bfloat16 and grads[1].dtype == torch.float32
    for a, b in zip(grads, expected, strict=True):
        assert torch.allclose(a.float(), b.float(), atol=2e-2 * b.abs().max().item())
