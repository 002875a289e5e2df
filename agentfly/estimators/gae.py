"""Generalized Advantage Estimation (Schulman et al., 2016, https://arxiv.org/abs/1506.02438).

Departures from the paper, as in verl's multi-turn PPO trainer:
- Observation tokens (mask 0) are skipped, not treated as time steps: the TD error and the
  running GAE pass through them unchanged, so earlier turns still receive credit for the final
  reward and ``gamma``/``lam`` apply once per *sampled* token.
- Advantages are whitened over the batch's sampled tokens; returns are not.
"""

from __future__ import annotations

import torch

from agentfly.core.reductions import masked_whiten
from agentfly.estimators.base import AdvantageInput, register_estimator


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
def gae(x: AdvantageInput) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE with batch-whitened advantages. Shape: (B, T) in, (B, T) out."""
    assert x.values is not None
    mask = x.response_mask
    advantages, returns = gae_advantages(x.token_level_rewards, x.values, mask, x.gamma, x.lam)
    advantages = masked_whiten(advantages, mask) * mask
    return advantages, returns
