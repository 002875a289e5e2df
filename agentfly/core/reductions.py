"""Masked tensor reductions and group bookkeeping shared by estimators and losses.

Shapes: ``values`` and ``mask`` are (B, T) unless said otherwise; ``mask`` holds 1 where a token
counts (a token the model sampled) and 0 elsewhere (prompt padding, tool observations, padding).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

EPS = 1e-8


def masked_sum(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of ``values`` where ``mask`` is set; over everything when ``dim`` is None."""
    prod = values * mask
    return prod.sum() if dim is None else prod.sum(dim=dim)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``values`` where ``mask`` is set (0 where nothing is set)."""
    count = mask.sum() if dim is None else mask.sum(dim=dim)
    return masked_sum(values, mask, dim) / (count + EPS)


def masked_var(values: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance over the masked entries (Bessel-corrected when ``unbiased``; 0 for < 2 entries)."""
    mean = masked_mean(values, mask)
    var = masked_mean((values - mean) ** 2, mask)
    count = mask.sum()
    if unbiased:
        if count < 2:
            return torch.zeros_like(var)
        var = var * count / (count - 1)
    return var


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    """Normalise to zero mean and unit variance over the masked entries (verl's ``masked_whiten``)."""
    mean = masked_mean(values, mask)
    var = masked_var(values, mask)
    whitened = (values - mean) * torch.rsqrt(var + EPS)
    if not shift_mean:
        whitened = whitened + mean
    return whitened


def group_ids(index: Sequence[Any] | torch.Tensor, device: torch.device | None = None) -> torch.Tensor:
    """Map arbitrary group labels (uids, ints, strings) to contiguous ids ``0..G-1``.

    Rows with the same label get the same id; ids follow first appearance. Shape: (B,) long.
    """
    if hasattr(index, "tolist"):  # tensors, numpy arrays
        index = index.tolist()
    mapping: dict[Any, int] = {}
    ids = [mapping.setdefault(label, len(mapping)) for label in index]
    return torch.tensor(ids, dtype=torch.long, device=device)


def group_stats(
    scores: torch.Tensor, gid: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-group count, mean and unbiased std of ``scores`` (B,), gathered back to rows.

    Returns three (B,) tensors. Groups of one row get count 1 and std 0 here; callers decide what a
    singleton means for them.
    """
    num_groups = int(gid.max().item()) + 1 if gid.numel() else 0
    counts = torch.zeros(num_groups, dtype=scores.dtype, device=scores.device)
    counts.index_add_(0, gid, torch.ones_like(scores))
    sums = torch.zeros_like(counts).index_add_(0, gid, scores)
    means = sums / counts
    sq = torch.zeros_like(counts).index_add_(0, gid, (scores - means[gid]) ** 2)
    stds = torch.where(counts > 1, sq / (counts - 1).clamp(min=1), torch.zeros_like(sq)).sqrt()
    return counts[gid], means[gid], stds[gid]
