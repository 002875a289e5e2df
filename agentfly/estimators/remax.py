"""ReMax (Li et al., 2023, https://arxiv.org/abs/2310.10505): REINFORCE with the reward of a greedy
rollout of the same prompt as the baseline.

Returns are the undiscounted reward-to-go over sampled tokens (``gamma`` is not used, as in verl);
the advantage subtracts the greedy baseline on every sampled token.
"""

from __future__ import annotations

import torch

from agentfly.estimators.base import register_estimator


@register_estimator("remax", needs_baselines=True)
def remax(
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
    """``return_t - baseline`` on sampled tokens. Shape: (B, T); ``reward_baselines`` (B,)."""
    assert reward_baselines is not None
    rewards = token_level_rewards * response_mask
    returns = rewards.flip(dims=[-1]).cumsum(dim=-1).flip(dims=[-1]) * response_mask
    baselines = reward_baselines.to(returns).reshape(-1, 1)  # (B, 1)
    advantages = returns - baselines * response_mask
    return advantages, returns
