"""KL penalty in the reward (``algorithm.use_kl_in_reward``), with a swappable KL controller."""

from __future__ import annotations

from typing import Any

from lightning.pytorch.callbacks import Callback

from agentfly.callbacks.batch_hooks import Batch, to_float
from agentfly.estimators.kl import kl_penalty
from agentfly.estimators.kl_controller import get_kl_controller
from agentfly.ops import masked_mean


class KLRewardCallback(Callback):
    """``token_level_rewards = token_level_scores - β · KL(old ‖ ref)`` per sampled token.

    β comes from the controller, which is updated after each batch with the batch's mean
    per-sequence KL and ``n_steps`` = batch size (as verl does). Its state is checkpointed.

    Args:
        kl_penalty: per-token estimator (see :func:`agentfly.estimators.kl_penalty`); ``full``
            is not available here because a batch carries sampled log-probabilities only.
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
        if kl_penalty == "full":
            raise ValueError(
                "algorithm.kl_penalty='full' needs full vocabulary rows and cannot shape the "
                "reward from sampled log-probabilities; use it as actor kl_loss_type instead"
            )
        self.kind = kl_penalty
        self.controller = get_kl_controller(kl_ctrl_type, kl_coef, target_kl, horizon)

    def on_rollout_batch(self, trainer: Any, pl_module: Any, batch: Batch) -> dict[str, float]:
        mask = batch["response_mask"].to(batch["token_level_scores"].dtype)
        kld = kl_penalty(batch["old_log_probs"], batch["ref_log_probs"], self.kind) * mask
        beta = self.controller.value
        batch["token_level_rewards"] = batch["token_level_scores"] - beta * kld
        current_kl = to_float(masked_mean(kld, mask, dim=-1).mean())
        self.controller.update(current_kl=current_kl, n_steps=mask.shape[0])
        return {"actor/reward_kl_penalty": current_kl, "actor/reward_kl_penalty_coeff": beta}

    def state_dict(self) -> dict[str, Any]:
        return {"kl_controller": self.controller.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.controller.load_state_dict(state_dict["kl_controller"])
