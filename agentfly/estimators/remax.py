"""ReMax (Li et al., 2023, https://arxiv.org/abs/2310.10505): REINFORCE with the reward of a greedy
rollout of the same prompt as the baseline.

Returns are the undiscounted reward-to-go over sampled tokens (``gamma`` is not used, as in verl);
the advantage subtracts the greedy baseline on every sampled token.
"""

from __future__ import annotations

import torch

from agentfly.estimators.base import AdvantageInput, register_estimator


@register_estimator("remax", needs_baselines=True)
def remax(x: AdvantageInput) -> tuple[torch.Tensor, torch.Tensor]:
    """``return_t - baseline`` on sampled tokens. Shape: (B, T); ``reward_baselines`` (B,)."""
    assert x.reward_baselines is not None
    mask = x.response_mask
    rewards = x.token_level_rewards * mask
    returns = rewards.flip(dims=[-1]).cumsum(dim=-1).flip(dims=[-1]) * mask
    baselines = x.reward_baselines.to(returns).reshape(-1, 1)  # (B, 1)
    advantages = returns - baselines * mask
    return advantages, returns
