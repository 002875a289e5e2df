"""REINFORCE Leave-One-Out (Ahmadian et al., 2024, https://arxiv.org/abs/2402.14740).

Advantage of a response = its outcome reward minus the mean reward of the *other* responses to
the same prompt, written as ``n/(n-1) * (r - mean_group)``. A group of one response keeps its
reward as the advantage (no baseline), as in verl.
"""

from __future__ import annotations

import torch

from agentfly.estimators.base import register_estimator
from agentfly.estimators.grpo import outcome_scores
from agentfly.ops import group_stats


@register_estimator("rloo", needs_groups=True)
def rloo(
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
    """RLOO outcome advantages, broadcast over sampled tokens. Shape: (B, T)."""
    assert index is not None
    scores = outcome_scores(token_level_rewards, response_mask)
    counts, means, _ = group_stats(scores, index)
    scale = counts / (counts - 1).clamp(min=1)
    adv = torch.where(counts > 1, scale * (scores - means), scores)
    adv = adv.unsqueeze(-1) * response_mask
    return adv, adv
