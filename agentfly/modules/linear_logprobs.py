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
The backward pass recomputes ``h Wᵀ`` under the autocast state of the forward (bf16-mixed
runs it in bf16 both times).

The trainer reaches it through :func:`hidden_instead_of_logits`
(``actor_rollout_ref.model.use_fused_kernels``): the model's LM head runs as the identity, so
every path that slices the logits (shared prompts, packed rows, images) gives the final hidden
states of the same positions instead. Only a head whose logits are exactly ``h Wᵀ`` can be
replaced: :func:`fused_head_problem` names what is not (a bias, a soft cap, a logit scale, an
adapter on the head).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
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
        ctx.set_materialize_grads(False)  # an output the loss does not read gets None: skipped
        ctx.temperature, ctx.chunk = temperature, chunk
        device = hidden.device.type
        ctx.autocast = (device, torch.is_autocast_enabled(device), torch.get_autocast_dtype(device))
        return logp, entropy

    @staticmethod
    def backward(ctx: Any, g_logp: torch.Tensor | None, g_entropy: torch.Tensor | None) -> tuple[Any, ...]:
        hidden, weight, targets = ctx.saved_tensors
        tau, chunk = ctx.temperature, ctx.chunk
        device, enabled, dtype = ctx.autocast
        g_hidden = torch.zeros_like(hidden) if ctx.needs_input_grad[0] else None
        g_weight = (
            torch.zeros_like(weight, dtype=torch.float32) if ctx.needs_input_grad[1] else None
        )
        for start in range(0, hidden.shape[0], chunk):
            end = start + chunk
            h = hidden[start:end]  # (c, H)
            with torch.autocast(device, dtype=dtype, enabled=enabled):  # the forward's logits
                z = (h @ weight.T).float() / tau  # (c, V)
            p = z.softmax(-1)  # (c, V)
            g_z = torch.zeros_like(z)
            if g_logp is not None:
                g_z -= p * g_logp[start:end, None]  # (c, V): −p part of onehot(y) − p
                g_z.scatter_add_(-1, targets[start:end, None], g_logp[start:end, None].float())
            if g_entropy is not None:
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


def fused_head_problem(model: Any) -> str | None:
    """Why ``model``'s logits are not its LM head's ``h Wᵀ`` (so :func:`linear_logprobs` cannot
    stand in for them), or None when they are."""
    head = model.get_output_embeddings()
    config = getattr(model, "config", None)
    if type(head) is not torch.nn.Linear:
        return f"its output head is a {type(head).__name__}, not a plain Linear (an adapter on the head?)"
    if head.bias is not None:
        return "its output head has a bias"
    for name in ("final_logit_softcapping", "logit_scale", "logits_scaling"):
        value = getattr(config, name, None) or getattr(getattr(config, "text_config", None), name, None)
        if value not in (None, 1, 1.0):
            return f"its config scales the logits ({name}={value})"
    return None


def check_fused_head(model: Any, path: str) -> None:
    """Refuse ``use_fused_kernels`` for a model whose logits are not its head's ``h Wᵀ``.

    Raises:
        InputError: :func:`fused_head_problem` names why, with the model's ``path``.
    """
    from agentfly.core.errors import InputError

    problem = fused_head_problem(model)
    if problem is not None:
        raise InputError(
            f"actor_rollout_ref.model.use_fused_kernels=true: {path}'s log-probabilities are not "
            f"its LM head's h Wᵀ ({problem}); set use_fused_kernels=false"
        )


def _identity(hidden: torch.Tensor) -> torch.Tensor:
    return hidden


@contextlib.contextmanager
def hidden_instead_of_logits(model: Any) -> Iterator[torch.Tensor]:
    """Run ``model``'s LM head as the identity inside the block: its ``logits`` output holds
    the final hidden states (..., H) of the positions it keeps. Yields the head's weight (V, H).

    Raises:
        ValueError: the head is not one whose logits are ``h Wᵀ`` (:func:`fused_head_problem`).
    """
    problem = fused_head_problem(model)
    if problem is not None:
        raise ValueError(f"use_fused_kernels: {type(model).__name__} cannot take the chunked log-probs: {problem}")
    head = model.get_output_embeddings()
    head.forward = _identity  # an instance attribute: nn.Module.__call__ reads it before the class's
    try:
        yield head.weight
    finally:
        del head.forward
