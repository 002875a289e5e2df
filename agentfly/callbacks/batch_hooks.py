"""The rollout-batch hook: where swappable callbacks shape the rewards and write the advantages.

A :class:`RolloutBatchCallback` is a Lightning callback with one more hook,
:meth:`~RolloutBatchCallback.on_rollout_batch`. Its one call site is
:func:`apply_rollout_callbacks`, which ``AgentRLModule.training_step`` calls once per iteration,
after the module has filled in the batch's no-grad passes (``old_log_probs``, ``ref_log_probs``,
``full_kl``, ``values``) and before the update reads ``advantages``. The callbacks are the
trainer's callbacks of that type (found by type, as Lightning finds its checkpoint callbacks),
run in ``stage`` order whatever the list order: reward shaping (:class:`KLRewardCallback`,
stage 0) before the advantages (:class:`AdvantageCallback`, stage 10). Swapping a callback, or the
config key that builds it, swaps the algorithm; the math stays in :mod:`agentfly.estimators`.

The fields each callback reads and writes are those of :class:`~agentfly.batch.RolloutBatch`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback

from agentfly.batch import RolloutBatch


class RolloutBatchCallback(Callback):
    """A Lightning callback that edits each training batch before the update; lower ``stage``
    runs first."""

    stage: int = 0

    def on_rollout_batch(
        self, trainer: Any, pl_module: Any, batch: RolloutBatch
    ) -> dict[str, float]:
        """Edit ``batch``'s fields in place and return metrics to log."""
        return {}


def rollout_batch_callbacks(callbacks: Iterable[Any]) -> list[RolloutBatchCallback]:
    """The :class:`RolloutBatchCallback` among ``callbacks``, in stage order."""
    found = [cb for cb in callbacks if isinstance(cb, RolloutBatchCallback)]
    return sorted(found, key=lambda cb: cb.stage)


def apply_rollout_callbacks(trainer: Any, pl_module: Any, batch: RolloutBatch) -> dict[str, float]:
    """Run the trainer's rollout-batch callbacks on ``batch``; merge their metrics.

    Raises:
        RuntimeError: no callback wrote ``advantages`` (the update cannot run without them).
    """
    metrics: dict[str, float] = {}
    for callback in rollout_batch_callbacks(getattr(trainer, "callbacks", [])):
        metrics.update(callback.on_rollout_batch(trainer, pl_module, batch))
    if batch.advantages is None:
        raise RuntimeError(
            "no callback wrote the batch's advantages: add AdvantageCallback (algorithm."
            "adv_estimator) to the trainer's callbacks"
        )
    return metrics


def to_float(x: torch.Tensor | float) -> float:
    return float(x.detach().item()) if isinstance(x, torch.Tensor) else float(x)
