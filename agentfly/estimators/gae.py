"""Generalized Advantage Estimation (Schulman et al., 2016, https://arxiv.org/abs/1506.02438).

Departures from the paper, as in verl's multi-turn PPO trainer:
- Observation tokens (mask 0) are skipped, not treated as time steps: the TD error and the
  running GAE pass through them unchanged, so earlier turns still receive credit for the final
  reward and ``gamma``/``lam`` apply once per *sampled* token.
- Advantages are whitened over the batch's sampled tokens; returns are not.
"""

from __future__ import annotations

import torch

from agentfly.estimators.base import register_estimator
from agentfly.ops import masked_whiten


def gae_advantages(
    token_level_rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Unwhitened GAE advantages and returns (``advantages + values``), both (B, T), masked."""
    batch, length = token_level_rewards.shape
    next_value = token_level_rewards.new_zeros(batch)  # value of the next *sampled* token
    last_gae = token_level_rewards.new_zeros(batch)
    advantages = torch.zeros_like(token_level_rewards)
    for t in reversed(range(length)):
        m = response_mask[:, t]
        delta = token_level_rewards[:, t] + gamma * next_value - values[:, t]
        gae_t = delta + gamma * lam * last_gae
        next_value = m * values[:, t] + (1 - m) * next_value
        last_gae = m * gae_t + (1 - m) * last_gae
        advantages[:, t] = last_gae
    returns = (advantages + values) * response_mask
    return advantages * response_mask, returns


@register_estimator("gae", needs_critic=True, uses=("gamma", "lam"))
def gae(
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
    """GAE with batch-whitened advantages. Shape: (B, T) in, (B, T) out."""
    assert values is not None
    advantages, returns = gae_advantages(token_level_rewards, values, response_mask, gamma, lam)
    advantages = masked_whiten(advantages, response_mask) * response_mask
    return advantages, returns
