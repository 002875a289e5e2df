"""Applies a registered advantage estimator to a rollout batch (``algorithm.adv_estimator``),
and says when an iteration has nothing to learn from: every advantage 0 (GRPO's groups each
scored alike), the update still taking its time. The first such iteration is a warning naming
what to try; every one is counted in ``training/no_signal_iterations``, and each iteration logs
``training/equal_reward_groups``, the share of its groups whose chains all scored alike."""

from __future__ import annotations

import logging
from typing import Any

from agentfly.callbacks.batch_hooks import RolloutBatchCallback, to_float
from agentfly.core.batch import RolloutBatch
from agentfly.core.batch_hooks import ADVANTAGE_STAGE
from agentfly.core.reductions import masked_mean
from agentfly.estimators.base import AdvantageInput, get_estimator

logger = logging.getLogger(__name__)


def equal_reward_share(scores: list[float], groups: list[int]) -> float:
    """The share of groups (rows sharing a group id) whose rows' scores are all equal."""
    by_group: dict[int, list[float]] = {}
    for score, group in zip(scores, groups, strict=True):
        by_group.setdefault(group, []).append(score)
    if not by_group:
        return 0.0
    return sum(1 for s in by_group.values() if max(s) - min(s) <= 1e-9) / len(by_group)


class AdvantageCallback(RolloutBatchCallback):
    """Writes the batch's ``advantages`` and ``returns`` with the named estimator.

    Reads ``token_level_rewards`` (after any reward shaping), ``response_mask``, ``index``,
    ``values``, ``reward_baselines``, ``turn_index`` and ``turn_anchor``; the estimator uses what
    it declares.

    Args:
        adv_estimator: a name registered in :data:`agentfly.estimators.ESTIMATORS` (or a
            ``module:attr`` spec), resolved here, once.
        gamma: discount factor.
        lam: GAE lambda.
        norm_adv_by_std_in_grpo: GRPO's std normalisation.
        step_advantage_w: GiGPO's weight of the step-level advantage.
        gigpo_mode: GiGPO's normalisation, ``mean_norm`` or ``mean_std_norm``.
    """

    stage = ADVANTAGE_STAGE

    def __init__(
        self,
        adv_estimator: str = "grpo",
        gamma: float = 1.0,
        lam: float = 1.0,
        norm_adv_by_std_in_grpo: bool = True,
        step_advantage_w: float = 1.0,
        gigpo_mode: str = "mean_norm",
    ) -> None:
        self.estimator = get_estimator(adv_estimator)
        self.gamma = gamma
        self.lam = lam
        self.norm_adv_by_std_in_grpo = norm_adv_by_std_in_grpo
        self.step_advantage_w = step_advantage_w
        self.gigpo_mode = gigpo_mode
        self.no_signal = 0  # iterations of this launch whose advantages were all 0

    @property
    def needs_critic(self) -> bool:
        return self.estimator.needs_critic

    def on_rollout_batch(
        self, trainer: Any, pl_module: Any, batch: RolloutBatch
    ) -> dict[str, float]:
        advantages, returns = self.estimator(
            AdvantageInput(
                token_level_rewards=batch.token_level_rewards,
                response_mask=batch.response_mask,
                index=batch.index,
                values=batch.values,
                reward_baselines=batch.reward_baselines,
                turn_index=batch.turn_index,
                turn_anchor=batch.turn_anchor,
                gamma=self.gamma,
                lam=self.lam,
                norm_adv_by_std_in_grpo=self.norm_adv_by_std_in_grpo,
                step_advantage_w=self.step_advantage_w,
                gigpo_mode=self.gigpo_mode,
            )
        )
        batch.advantages, batch.returns = advantages, returns
        mask = batch.response_mask.to(advantages.dtype)
        sampled = mask.bool()
        metrics = {
            "critic/advantages/mean": to_float(masked_mean(advantages, mask)),
            "critic/returns/mean": to_float(masked_mean(returns, mask)),
        }
        if bool(sampled.any()):
            metrics["critic/advantages/max"] = to_float(advantages[sampled].max())
            metrics["critic/advantages/min"] = to_float(advantages[sampled].min())
        scores = batch.token_level_rewards.sum(-1).tolist()
        equal = equal_reward_share(scores, [int(g) for g in batch.index.tolist()])
        metrics["training/equal_reward_groups"] = equal
        if bool(sampled.any()) and float(advantages[sampled].abs().max()) == 0.0:
            self.no_signal += 1
            if self.no_signal == 1:
                logger.warning(
                    "iteration %d has no learning signal: every advantage is 0 (%.0f%% of its "
                    "groups' chains all scored alike), so its update learns nothing from the "
                    "rewards: only the entropy bonus and the KL term move the policy "
                    "(actor_rollout_ref.actor.entropy_coeff, kl_loss_coef), and Adam scales even "
                    "their small gradients to steps of the full learning rate. A model that never "
                    "earns a different reward within a group needs a "
                    "warm start (agentfly sft on a few conversations that do it: README, \"Train "
                    "your own task\"), more chains per prompt (agent.run_config.num_chains), a "
                    "reward with partial credit, or algorithm.filter_groups to leave such groups "
                    "out and sample others. Further such iterations are counted in "
                    "training/no_signal_iterations.",
                    int(getattr(pl_module, "iteration", 0)) + 1, 100 * equal,
                )
        metrics["training/no_signal_iterations"] = float(self.no_signal)
        return metrics
