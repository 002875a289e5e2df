"""REINFORCE Leave-One-Out (Ahmadian et al., 2024, https://arxiv.org/abs/2402.14740).

Advantage of a response = its outcome reward minus the mean reward of the *other* responses to
the same prompt, written as ``n/(n-1) * (r - mean_group)``. A group of one response keeps its
reward as the advantage (no baseline), as in verl.
"""

from __future__ import annotations

import torch

from agentfly.core.reductions import group_stats
from agentfly.estimators.base import AdvantageInput, register_estimator
from agentfly.estimators.grpo import outcome_scores


@register_estimator("rloo", needs_groups=True)
def rloo(x: AdvantageInput) -> tuple[torch.Tensor, torch.Tensor]:
    """RLOO outcome advantages, broadcast over sampled tokens. Shape: (B, T)."""
    assert isinstance(x.index, torch.Tensor)
    scores = outcome_scores(x.token_level_rewards, x.response_mask)
    counts, means, _ = group_stats(scores, x.index)
    scale = counts / (counts - 1).clamp(min=1)
    adv = torch.where(counts > 1, scale * (scores - means), scores)
    adv = adv.unsqueeze(-1) * x.response_mask
    return adv, adv
