"""KL penalty in the reward (``algorithm.use_kl_in_reward``), with a swappable KL controller."""

from __future__ import annotations

from typing import Any

import torch

from agentfly.callbacks.batch_hooks import RolloutBatchCallback, to_float
from agentfly.core.batch import RolloutBatch
from agentfly.core.reductions import masked_mean
from agentfly.estimators import kl as kl_math
from agentfly.estimators.kl_controller import get_kl_controller


class KLRewardCallback(RolloutBatchCallback):
    """``token_level_rewards = token_level_scores - β · KL(old ‖ ref)`` per sampled token.

    β comes from the controller, which is updated after each batch with the batch's mean
    per-sequence KL and ``n_steps`` = batch size (as verl does). Its state is checkpointed.

    The sampled kinds read the batch's ``old_log_probs`` and ``ref_log_probs``; ``full`` reads
    ``full_kl``, the full-vocabulary KL the module computes from both models' logits when it is
    built with ``kl_penalty="full"``. A straight-through kind (``k3+``...) shapes the reward with
    its value (no gradient flows through a reward).

    Args:
        kl_penalty: per-token estimator (see :func:`agentfly.estimators.kl_penalty`).
        kl_ctrl_type: ``fixed`` or ``adaptive``.
        kl_coef: (initial) coefficient β.
        target_kl: adaptive target.
        horizon: adaptive horizon.
    """

    stage = 0

    def __init__(
        self,
        kl_penalty: str = "kl",
        kl_ctrl_type: str = "fixed",
        kl_coef: float = 0.001,
        target_kl: float = 0.1,
        horizon: int = 10000,
    ) -> None:
        if kl_penalty != "full":  # an unknown kind fails here, not at the first batch
            kl_math.kl_penalty(torch.zeros(1), torch.zeros(1), kl_penalty)
        self.kind = kl_penalty
        self.controller = get_kl_controller(kl_ctrl_type, kl_coef, target_kl, horizon)

    def on_rollout_batch(
        self, trainer: Any, pl_module: Any, batch: RolloutBatch
    ) -> dict[str, float]:
        mask = batch.response_mask.to(batch.token_level_scores.dtype)
        if self.kind == "full":
            if batch.full_kl is None:
                raise KeyError(
                    "kl_penalty='full' shapes the reward with the batch's `full_kl`, which "
                    "AgentRLModule computes only when built with kl_penalty='full'"
                )
            kld = batch.full_kl * mask
        else:
            if batch.old_log_probs is None or batch.ref_log_probs is None:
                raise KeyError(
                    f"kl_penalty={self.kind!r} in the reward reads the batch's `old_log_probs` "
                    "and `ref_log_probs`, which AgentRLModule computes only when built with "
                    "use_reference=True and use_kl_in_reward=True"
                )
            kld = kl_math.kl_penalty(batch.old_log_probs, batch.ref_log_probs, self.kind)
            kld = kld * mask
        beta = self.controller.value
        batch.token_level_rewards = batch.token_level_scores - beta * kld
        current_kl = to_float(masked_mean(kld, mask, dim=-1).mean())
        self.controller.update(current_kl=current_kl, n_steps=mask.shape[0])
        return {"actor/reward_kl_penalty": current_kl, "actor/reward_kl_penalty_coeff": beta}

    def state_dict(self) -> dict[str, Any]:
        return {"kl_controller": self.controller.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.controller.load_state_dict(state_dict["kl_controller"])
