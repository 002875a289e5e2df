"""Log-probabilities and entropies straight from the final hidden states and the LM head, in
chunks of tokens, without the (N, V) logits.

``log_softmax(h Wᵀ / τ)`` needs the logits of every token in fp32 (N × V floats, and their
gradient), the largest tensors of a step with a large vocabulary. :func:`linear_logprobs`
computes a chunk of ``chunk`` tokens at a time in the forward pass, keeps only the (N,) results,
and recomputes each chunk's logits in the backward pass (the "fused linear cross-entropy" of
Liger-Kernel and of verl's ``use_fused_kernels``, here in plain PyTorch): memory grows with the
chunk, not with tokens × vocabulary. The gradients are the analytic ones:

- ``∂ log p(y)/∂z = onehot(y) − p``,
- ``∂ H/∂z = −p ⊙ (z − Σ_v p_v z_v)``,

with ``z = h Wᵀ / τ`` in fp32, then ``∂/∂h = (∂/∂z) W / τ`` and ``∂/∂W = (∂/∂z)ᵀ h / τ``.
An LM head with a bias is not handled (none of the supported models has one).
"""

from __future__ import annotations

from typing import Any

import torch


class _LinearLogProbs(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        targets: torch.Tensor,
        temperature: float,
        chunk: int,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        logp = hidden.new_empty(hidden.shape[0], dtype=torch.float32)  # (N,)
        entropy = torch.empty_like(logp)  # (N,)
        for start in range(0, hidden.shape[0], chunk):
            end = start + chunk
            z = (hidden[start:end] @ weight.T).float() / temperature  # (c, V)
            lse = z.logsumexp(-1)  # (c,)
            logp[start:end] = z.gather(-1, targets[start:end, None]).squeeze(-1) - lse
            entropy[start:end] = lse - (z.softmax(-1) * z).sum(-1)
        ctx.save_for_backward(hidden, weight, targets)
        ctx.temperature, ctx.chunk = temperature, chunk
        return logp, entropy

    @staticmethod
    def backward(ctx: Any, g_logp: torch.Tensor, g_entropy: torch.Tensor) -> tuple[Any, ...]:
        hidden, weight, targets = ctx.saved_tensors
        tau, chunk = ctx.temperature, ctx.chunk
        g_hidden = torch.zeros_like(hidden) if ctx.needs_input_grad[0] else None
        g_weight = (
            torch.zeros_like(weight, dtype=torch.float32) if ctx.needs_input_grad[1] else None
        )
        for start in range(0, hidden.shape[0], chunk):
            end = start + chunk
            h = hidden[start:end]  # (c, H)
            z = (h @ weight.T).float() / tau  # (c, V)
            p = z.softmax(-1)  # (c, V)
            g_z = -p * g_logp[start:end, None]  # (c, V): −p part of onehot(y) − p
            g_z.scatter_add_(-1, targets[start:end, None], g_logp[start:end, None])
            expected = (p * z).sum(-1, keepdim=True)  # (c, 1)
            g_z -= g_entropy[start:end, None] * p * (z - expected)
            g_z /= tau
            if g_hidden is not None:
                g_hidden[start:end] = (g_z @ weight.float()).to(hidden.dtype)  # (c, H)
            if g_weight is not None:
                g_weight += g_z.T @ h.float()  # (V, H)
        g_weight = None if g_weight is None else g_weight.to(weight.dtype)
        return g_hidden, g_weight, None, None, None


def linear_logprobs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    *,
    temperature: float = 1.0,
    chunk: int = 1024,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``log softmax(h Wᵀ / τ)[y]`` and the entropy of ``softmax(h Wᵀ / τ)``, ``chunk`` tokens
    at a time (see the module docstring); differentiable in ``hidden`` and ``weight``.

    Args:
        hidden: final hidden states. Shape: (..., H).
        weight: the LM head's weight. Shape: (V, H).
        targets: the token ids whose log-probabilities are wanted. Shape: (...), long.
        temperature: τ.
        chunk: tokens per chunk.

    Returns:
        ``(log_probs, entropy)``, each of ``targets``' shape, float32.
    """
    shape = targets.shape
    flat_hidden = hidden.reshape(-1, hidden.shape[-1])  # (N, H)
    logp, entropy = _LinearLogProbs.apply(
        flat_hidden, weight, targets.reshape(-1), temperature, chunk
    )
    return logp.view(shape), entropy.view(shape)
