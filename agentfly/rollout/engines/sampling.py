"""Next-token sampling with per-row parameters, and the log-probability the trainer reproduces.

The log-probability of a sampled token is ``log_softmax(logits / temperature)`` at that token
(raw logits for greedy rows), computed before top-k / top-p truncation: truncation only limits
what may be drawn. Rows carrying their own seed draw from their own generator, so their samples do
not depend on which other requests share the batch (up to floating-point differences of the
forward pass itself).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def sample_tokens(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_p: torch.Tensor,
    top_k: torch.Tensor,
    draws: Sequence[tuple[torch.Tensor, torch.Generator]],
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick one token per row and return it with its log-probability.

    Args:
        logits: (B, V) next-token logits, fp32.
        temperature: (B,) softmax temperature per row; 0 means greedy (argmax).
        top_p: (B,) nucleus mass kept per row (1 keeps all).
        top_k: (B,) most likely tokens kept per row (<= 0 keeps all).
        draws: (row indices, generator) pairs covering the sampled (non-greedy) rows; each
            generator draws one uniform per row, in row order, and all rows are then sampled
            by one batched inverse-CDF lookup.

    Returns:
        chosen ids (B,) and their log-probabilities (B,).
    """
    import torch

    greedy = temperature == 0  # (B,)
    scale = torch.where(greedy, torch.ones_like(temperature), temperature)[:, None]  # (B, 1)
    scaled = logits / scale  # (B, V)
    logp = torch.log_softmax(scaled, dim=-1)  # (B, V)
    chosen = logits.argmax(dim=-1)  # (B,) greedy rows keep this

    if draws:
        rows = torch.cat([r for r, _ in draws])  # (S,) every sampled row
        # one uniform per row from the row's own generator (a few scalars), then one batched
        # inverse-CDF lookup: per-row seeds without a multinomial call per generator
        uniforms = torch.cat([torch.rand(len(r), generator=g, device=r.device) for r, g in draws])
        picked = scaled[rows]  # (S, V)
        vocab = picked.shape[-1]
        if bool(((top_p[rows] < 1) | ((top_k[rows] > 0) & (top_k[rows] < vocab))).any()):
            picked = truncate(picked, top_p[rows], top_k[rows])  # the sort only when asked for
        cdf = picked.softmax(dim=-1).cumsum(dim=-1)  # (S, V)
        drawn = torch.searchsorted(cdf, (uniforms * cdf[:, -1])[:, None], right=True)[:, 0]  # (S,)
        # rounding may put the draw past the last token with mass: take that token instead
        last = vocab - 1 - (picked > float("-inf")).flip(-1).int().argmax(-1)  # (S,)
        chosen[rows] = torch.minimum(drawn, last)
    return chosen, logp.gather(-1, chosen[:, None])[:, 0]


def truncate(scaled: torch.Tensor, top_p: torch.Tensor, top_k: torch.Tensor) -> torch.Tensor:
    """Set logits outside each row's top-k and top-p set to -inf.

    Args:
        scaled: (B, V) temperature-scaled logits.
        top_p: (B,) nucleus mass; a token is kept when the mass of strictly more likely tokens
            (renormalised after top-k, as vLLM does) is below it; the most likely is always kept.
        top_k: (B,) tokens kept; <= 0 or >= V keeps all.
    """
    import torch

    vocab = scaled.shape[-1]
    sorted_logits, order = scaled.sort(dim=-1, descending=True)  # (B, V)
    k = torch.where((top_k <= 0) | (top_k > vocab), torch.full_like(top_k, vocab), top_k)
    ranks = torch.arange(vocab, device=scaled.device)[None, :]  # (1, V)
    drop_sorted = ranks >= k[:, None]  # (B, V) outside top-k
    probs = sorted_logits.masked_fill(drop_sorted, float("-inf")).softmax(dim=-1)  # top-k first
    mass_before = probs.cumsum(dim=-1) - probs  # (B, V)
    drop_sorted |= mass_before > top_p[:, None]
    drop_sorted[:, 0] = False
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)  # back to vocab order
    return scaled.masked_fill(drop, float("-inf"))
