"""On-Policy RL with Optimal reward baseline (Hao et al., 2025, https://arxiv.org/abs/2505.23585).

The baseline is the length-weighted mean reward of the group, ``sum(l_i r_i) / sum(l_i)``, where
``l_i`` counts the response's sampled tokens (observation tokens are not part of the length). A
group of one has baseline 0.
"""

from __future__ import annotations

import torch

from agentfly.estimators.base import AdvantageInput, register_estimator
from agentfly.estimators.grpo import outcome_scores


@register_estimator("opo", needs_groups=True)
def opo(x: AdvantageInput) -> tuple[torch.Tensor, torch.Tensor]:
    """``r - baseline_group`` broadcast over sampled tokens. Shape: (B, T)."""
    index = x.index
    assert isinstance(index, torch.Tensor)
    scores = outcome_scores(x.token_level_rewards, x.response_mask)
    lengths = x.response_mask.sum(dim=-1)  # (B,)
    num_groups = int(index.max().item()) + 1
    zeros = scores.new_zeros(num_groups)
    weighted = zeros.index_add(0, index, lengths * scores)
    total_len = zeros.index_add(0, index, lengths)
    counts = zeros.index_add(0, index, torch.ones_like(scores))
    baseline = torch.where(counts > 1, weighted / total_len.clamp(min=1e-8), zeros)
    adv = (scores - baseline[index]).unsqueeze(-1) * x.response_mask
    return adv, adv
