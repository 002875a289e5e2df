"""On-Policy RL with Optimal reward baseline (Hao et al., 2025, https://arxiv.org/abs/2505.23585).

The baseline is the length-weighted mean reward of the group, ``sum(l_i r_i) / sum(l_i)``, where
``l_i`` counts the response's sampled tokens (observation tokens are not part of the length). A
group of one has baseline 0.
"""

from __future__ import annotations

import torch

from agentfly.estimators.base import register_estimator
from agentfly.estimators.grpo import outcome_scores


@register_estimator("opo", needs_groups=True)
def opo(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: torch.Tensor | None = None,
    values: torch.Tensor | None = None,
    reward_baselines: torch.Tensor | None = None,
    gamma: float = 1.0,
    lam: float = 1.0,
    norm_adv_by_std_in_grpo: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``r - baseline_group`` broadcast over sampled tokens. Shape: (B, T)."""
    assert index is not None
    scores = outcome_scores(token_level_rewards, response_mask)
    lengths = response_mask.sum(dim=-1)  # (B,)
    num_groups = int(index.max().item()) + 1
    zeros = scores.new_zeros(num_groups)
    weighted = zeros.index_add(0, index, lengths * scores)
    total_len = zeros.index_add(0, index, lengths)
    counts = zeros.index_add(0, index, torch.ones_like(scores))
    baseline = torch.where(counts > 1, weighted / total_len.clamp(min=1e-8), zeros)
    adv = (scores - baseline[index]).unsqueeze(-1) * response_mask
    return adv, adv
