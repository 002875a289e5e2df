"""REINFORCE++ (Hu, 2025, https://arxiv.org/abs/2501.03262), with and without a group baseline.

Departure from verl's implementation: the discounted return passes through observation tokens
(mask 0) unchanged instead of being reset there. verl resets the running return at every masked
token ("reset after EOS"), which in a multi-turn response cuts earlier turns off from the final
reward. Here ``gamma`` applies once per sampled token and rewards on masked tokens are ignored.
"""

from __future__ import annotations

import torch

from agentfly.core.reductions import group_stats, masked_whiten
from agentfly.estimators.base import AdvantageInput, register_estimator
from agentfly.estimators.grpo import outcome_scores


def discounted_returns(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, gamma: float
) -> torch.Tensor:
    """Return-to-go over sampled tokens, carried unchanged across masked ones. Shape: (B, T)."""
    returns = torch.zeros_like(token_level_rewards)
    running = token_level_rewards.new_zeros(token_level_rewards.shape[0])
    for t in reversed(range(token_level_rewards.shape[1])):
        m = response_mask[:, t]
        running = m * (token_level_rewards[:, t] + gamma * running) + (1 - m) * running
        returns[:, t] = running
    return returns * response_mask


@register_estimator("reinforce_plus_plus", uses=("gamma",))
def reinforce_plus_plus(x: AdvantageInput) -> tuple[torch.Tensor, torch.Tensor]:
    """Discounted returns whitened over the batch's sampled tokens. Shape: (B, T)."""
    returns = discounted_returns(x.token_level_rewards, x.response_mask, x.gamma)
    advantages = masked_whiten(returns, x.response_mask) * x.response_mask
    return advantages, returns


@register_estimator("reinforce_plus_plus_baseline", needs_groups=True)
def reinforce_plus_plus_baseline(x: AdvantageInput) -> tuple[torch.Tensor, torch.Tensor]:
    """Outcome reward minus the group mean (singleton: mean 0), then whitened over the batch."""
    assert isinstance(x.index, torch.Tensor)
    mask = x.response_mask
    scores = outcome_scores(x.token_level_rewards, mask)
    counts, means, _ = group_stats(scores, x.index)
    centered = scores - torch.where(counts > 1, means, torch.zeros_like(means))
    adv = centered.unsqueeze(-1) * mask
    adv = masked_whiten(adv, mask) * mask
    return adv, adv
