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

    from agentfly.rollout.engines.base import SamplingParams


def sample_tokens(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_p: torch.Tensor,
    top_k: torch.Tensor,
    draws: tuple[torch.Tensor, torch.Tensor] | None,
    truncated: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick one token per row and return it with its log-probability.

    Args:
        logits: (B, V) next-token logits, fp32.
        temperature: (B,) softmax temperature per row; 0 means greedy (argmax).
        top_p: (B,) nucleus mass kept per row (1 keeps all).
        top_k: (B,) most likely tokens kept per row (<= 0 keeps all).
        draws: ``(rows, uniforms)``: the sampled (non-greedy) rows (S,) and one uniform in
            [0, 1) per row (S,), both on the logits' device (see :func:`draw_uniforms`); all
            rows are sampled by one batched inverse-CDF lookup. None: every row is greedy.
        truncated: whether some sampled row has a top-k / top-p limit (the caller knows it from
            the sampling parameters); None reads it from ``top_p`` / ``top_k``, a device sync.

    Returns:
        chosen ids (B,) and their log-probabilities (B,).
    """
    import torch

    greedy = temperature == 0  # (B,)
    scale = torch.where(greedy, torch.ones_like(temperature), temperature)[:, None]  # (B, 1)
    scaled = logits / scale  # (B, V)
    logp = torch.log_softmax(scaled, dim=-1)  # (B, V)
    chosen = logits.argmax(dim=-1)  # (B,) greedy rows keep this

    if draws is not None and len(draws[0]):
        rows, uniforms = draws  # (S,), (S,)
        picked = scaled[rows]  # (S, V)
        vocab = picked.shape[-1]
        if truncated is None:
            truncated = bool(((top_p[rows] < 1) | ((top_k[rows] > 0) & (top_k[rows] < vocab))).any())
        if truncated:
            picked = truncate(picked, top_p[rows], top_k[rows])  # the sort only when asked for
        cdf = picked.softmax(dim=-1).cumsum(dim=-1)  # (S, V)
        drawn = torch.searchsorted(cdf, (uniforms * cdf[:, -1])[:, None], right=True)[:, 0]  # (S,)
        # rounding may put the draw past the last token with mass: take that token instead
        last = vocab - 1 - (picked > float("-inf")).flip(-1).int().argmax(-1)  # (S,)
        chosen[rows] = torch.minimum(drawn, last)
    return chosen, logp.gather(-1, chosen[:, None])[:, 0]


def draw_uniforms(
    groups: Sequence[tuple[Sequence[int], torch.Generator]], device: torch.device | str
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(rows, uniforms)`` for :func:`sample_tokens`, drawn on the CPU and moved in one go.

    Each ``(row indices, generator)`` group draws one uniform per row, in row order, from its
    CPU generator: a seeded request samples the same uniforms on any device, and a batch of
    per-chain seeds costs a few microseconds per row instead of a CUDA launch and a copy each.
    """
    import torch

    if not groups:
        return None
    rows = torch.tensor([i for idx, _ in groups for i in idx], dtype=torch.long)
    uniforms = torch.cat([torch.rand(len(idx), generator=g) for idx, g in groups])
    return rows.to(device), uniforms.to(device)


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


def truncates(sampling: SamplingParams) -> bool:
    """Whether a row's top-k / top-p limits what it may draw (a vocabulary-wide sort)."""
    return sampling.top_p < 1 or sampling.top_k > 0
