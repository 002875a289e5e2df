"""The rollout-batch hook: where swappable callbacks shape the rewards and write the advantages.

A :class:`RolloutBatchCallback` is a Lightning callback with one more hook,
:meth:`~RolloutBatchCallback.on_rollout_batch`. The module holds the ones it runs in its
``rollout_callbacks`` list: each callback the trainer has adds itself there in Lightning's
``setup`` hook (before the first batch of a fit or validation) and takes itself out in
``teardown``, so a callback given in ``trainer.callbacks`` (agentfly builds
:class:`AdvantageCallback` from ``algorithm.adv_estimator`` and :class:`KLRewardCallback` from
``algorithm.use_kl_in_reward``; a user adds their own by ``--trainer.callbacks+=``) runs without
anyone searching the trainer's callbacks. The one call site is :func:`apply_rollout_callbacks`,
which ``AgentRLModule.training_step`` calls once per iteration, after the module has filled in
the batch's no-grad passes (``old_log_probs``, ``ref_log_probs``, ``full_kl``, ``values``) and
before the update reads ``advantages``. Callbacks run in ``stage`` order whatever the list order
(ties in the trainer's order): reward shaping (:class:`KLRewardCallback`, stage 0) before the
advantages (:class:`AdvantageCallback`, stage 10). Swapping a callback, or the config key that
builds it, swaps the algorithm; the math stays in :mod:`agentfly.estimators`.

The fields each callback reads and writes are those of :class:`~agentfly.core.batch.RolloutBatch`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback

from agentfly.core.batch import RolloutBatch


class RolloutBatchCallback(Callback):
    """A Lightning callback that edits each training batch before the update; lower ``stage``
    runs first.

    It joins the module's ``rollout_callbacks`` in :meth:`setup` and leaves them in
    :meth:`teardown`: a subclass that overrides either calls ``super()``.
    """

    stage: int = 0

    def on_rollout_batch(
        self, trainer: Any, pl_module: Any, batch: RolloutBatch
    ) -> dict[str, float]:
        """Edit ``batch``'s fields in place and return metrics to log."""
        return {}

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        hooks = getattr(pl_module, "rollout_callbacks", None)
        if hooks is not None and not any(cb is self for cb in hooks):
            hooks.append(self)

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        hooks = getattr(pl_module, "rollout_callbacks", None)
        if hooks is not None:
            hooks[:] = [cb for cb in hooks if cb is not self]


def apply_rollout_callbacks(
    callbacks: Iterable[RolloutBatchCallback], trainer: Any, pl_module: Any, batch: RolloutBatch
) -> dict[str, float]:
    """Run ``callbacks`` on ``batch`` in ``stage`` order; merge their metrics.

    Raises:
        RuntimeError: no callback wrote ``advantages`` (the update cannot run without them).
    """
    metrics: dict[str, float] = {}
    for callback in sorted(callbacks, key=lambda cb: cb.stage):
        metrics.update(callback.on_rollout_batch(trainer, pl_module, batch))
    if batch.advantages is None:
        raise RuntimeError(
            "no callback wrote the batch's advantages: add AdvantageCallback (algorithm."
            "adv_estimator) to the trainer's callbacks"
        )
    return metrics


def to_float(x: torch.Tensor | float) -> float:
    return float(x.detach().item()) if isinstance(x, torch.Tensor) else float(x)
