"""Applies a registered advantage estimator to a rollout batch (``algorithm.adv_estimator``)."""

from __future__ import annotations

from typing import Any

from lightning.pytorch.callbacks import Callback

from agentfly.callbacks.batch_hooks import Batch, to_float
from agentfly.estimators.base import get_estimator
from agentfly.ops import masked_mean


class AdvantageCallback(Callback):
    """Writes ``advantages`` and ``returns`` into the batch with the named estimator.

    Args:
        adv_estimator: a name registered in :data:`agentfly.estimators.ESTIMATORS`.
        gamma: discount factor.
        lam: GAE lambda.
        norm_adv_by_std_in_grpo: GRPO's std normalisation.
    """

    stage = 10

    def __init__(
        self,
        adv_estimator: str = "grpo",
        gamma: float = 1.0,
        lam: float = 1.0,
        norm_adv_by_std_in_grpo: bool = True,
    ) -> None:
        self.estimator = get_estimator(adv_estimator)
        self.gamma = gamma
        self.lam = lam
        self.norm_adv_by_std_in_grpo = norm_adv_by_std_in_grpo

    @property
    def needs_critic(self) -> bool:
        return self.estimator.needs_critic

    def on_rollout_batch(self, trainer: Any, pl_module: Any, batch: Batch) -> dict[str, float]:
        rewards = batch.get("token_level_rewards", batch.get("token_level_scores"))
        if rewards is None:
            raise KeyError("rollout batch has neither token_level_rewards nor token_level_scores")
        advantages, returns = self.estimator(
            token_level_rewards=rewards,
            response_mask=batch["response_mask"],
            index=batch.get("index"),
            values=batch.get("values"),
            reward_baselines=batch.get("reward_baselines"),
            gamma=self.gamma,
            lam=self.lam,
            norm_adv_by_std_in_grpo=self.norm_adv_by_std_in_grpo,
        )
        batch["advantages"], batch["returns"] = advantages, returns
        mask = batch["response_mask"].to(advantages.dtype)
        sampled = mask.bool()
        metrics = {
            "critic/advantages/mean": to_float(masked_mean(advantages, mask)),
            "critic/returns/mean": to_float(masked_mean(returns, mask)),
        }
        if bool(sampled.any()):
            metrics["critic/advantages/max"] = to_float(advantages[sampled].max())
            metrics["critic/advantages/min"] = to_float(advantages[sampled].min())
        return metrics
