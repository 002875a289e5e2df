"""Per-token KL estimators between the policy and the reference model.

Kinds (Schulman, "Approximating KL Divergence", http://joschu.net/blog/kl-approx.html):
``kl``/``k1`` = log p - log q; ``abs`` = |log p - log q|; ``mse``/``k2`` = ½(log p - log q)²;
``low_var_kl``/``k3`` = exp(log q - log p) - (log q - log p) - 1, with the log-ratio clamped to
±20 and the result to ±10 as in verl; ``k1+``/``k3+``/... = straight-through forms whose value is
the named estimator and whose gradient is k2's (unbiased gradient of KL, Liu et al. 2025).
``full`` is the exact KL over the vocabulary, Σ_v p(v)(log p(v) - log q(v)), and takes full
log-probability rows (B, T, V) instead of sampled log-probabilities (verl leaves it
unimplemented); :func:`full_kl_from_logits` computes it from two models' logits a chunk of
positions at a time, which is how the trainer shapes the reward with it.
"""

from __future__ import annotations

import torch

KL_PENALTIES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "full")


def _sampled_kl(logprob: torch.Tensor, ref_logprob: torch.Tensor, kind: str) -> torch.Tensor:
    if kind in ("kl", "k1"):
        return logprob - ref_logprob
    if kind == "abs":
        return (logprob - ref_logprob).abs()
    if kind in ("mse", "k2"):
        return 0.5 * (logprob - ref_logprob).square()
    if kind in ("low_var_kl", "k3"):
        log_ratio = (ref_logprob - logprob).clamp(min=-20, max=20)
        return (log_ratio.exp() - log_ratio - 1).clamp(min=-10, max=10)
    raise ValueError(
        f"unknown kl_penalty {kind!r} (known: {', '.join(KL_PENALTIES)}, "
        f"and the straight-through forms {', '.join(k + '+' for k in KL_PENALTIES[:-1])})"
    )


def full_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Exact KL(p || q) per position from full log-probability rows. (B, T, V) -> (B, T)."""
    if logprobs.dim() < 3 or logprobs.shape != ref_logprobs.shape:
        raise ValueError(
            "kl_penalty='full' needs full log-probability rows of equal shape (B, T, V); got "
            f"{tuple(logprobs.shape)} and {tuple(ref_logprobs.shape)}"
        )
    return (logprobs.exp() * (logprobs - ref_logprobs)).sum(dim=-1)


def full_kl_from_logits(
    logits: torch.Tensor, ref_logits: torch.Tensor, chunk_size: int = 256
) -> torch.Tensor:
    """Exact KL(softmax(logits) || softmax(ref_logits)) per position, from raw logits.

    The log-softmax rows are formed ``chunk_size`` positions at a time, so besides the two
    logits tensors only one chunk's rows exist. Differentiable in both arguments.

    Args:
        logits: the policy's logits. Shape: (..., V).
        ref_logits: the reference model's logits. Shape: (..., V).
        chunk_size: positions per chunk.

    Returns:
        Σ_v p(v)(log p(v) - log q(v)). Shape: (...).
    """
    if logits.shape != ref_logits.shape or logits.dim() < 2:
        raise ValueError(
            f"logits {tuple(logits.shape)} and ref_logits {tuple(ref_logits.shape)} must have "
            "the same shape (..., V)"
        )
    vocab = logits.shape[-1]
    flat, ref_flat = logits.reshape(-1, vocab), ref_logits.reshape(-1, vocab)  # (N, V)
    if flat.shape[0] == 0:
        return logits.new_zeros(logits.shape[:-1])
    parts = [
        full_kl(p.log_softmax(-1)[None], q.log_softmax(-1)[None])[0]  # (1, c, V) -> (c,)
        for p, q in zip(flat.split(chunk_size), ref_flat.split(chunk_size), strict=True)
    ]
    return torch.cat(parts).reshape(logits.shape[:-1])


def kl_penalty(logprob: torch.Tensor, ref_logprob: torch.Tensor, kind: str = "kl") -> torch.Tensor:
    """Per-token KL estimate of the policy from the reference.

    Args:
        logprob: policy log-probabilities of the sampled tokens, (B, T); for ``full``, the
            policy's log-softmax rows, (B, T, V).
        ref_logprob: the reference model's, same shape.
        kind: one of :data:`KL_PENALTIES`, or a sampled kind followed by ``+``.

    Returns:
        (B, T) per-token penalty.
    """
    if kind == "full":
        return full_kl(logprob, ref_logprob)
    if kind.endswith("+"):
        value = _sampled_kl(logprob, ref_logprob, kind[:-1])
        k2 = 0.5 * (logprob - ref_logprob).square()
        return k2 - k2.detach() + value.detach()
    return _sampled_kl(logprob, ref_logprob, kind)
