"""The rollout-batch hooks: what a hook is, and running them in order.

The module (:mod:`agentfly.modules.rl_module`) and the callbacks both import this file; neither
imports the other.

``AgentRLModule.training_step`` holds a list of hooks (``rollout_callbacks``) and runs them twice
per iteration, after it has filled in the batch's no-grad passes (``old_log_probs``,
``ref_log_probs``, ``full_kl``, ``values``):

1. :func:`shape_rewards` runs the hooks whose ``stage`` is below :data:`ADVANTAGE_STAGE`: they
   turn ``token_level_scores`` into ``token_level_rewards``;
2. :func:`compute_advantages` runs the others: the advantage estimator's writes ``advantages``
   and ``returns``; a later stage may read or change them before the update.

Within each, hooks run in ``stage`` order whatever the list order (ties in the list's order).
A hook is anything with a ``stage`` and ``on_rollout_batch`` (:class:`RolloutBatchHook`); the
Lightning callbacks that are hooks, and that add themselves to the list, are
:mod:`agentfly.callbacks` (the module knows none of them).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from agentfly.core.batch import RolloutBatch

#: the advantage estimator's stage: hooks below it shape the rewards, the others come after it
ADVANTAGE_STAGE = 10


class RolloutBatchHook(Protocol):
    """Edits each training batch before the update; lower ``stage`` runs first."""

    stage: int

    def on_rollout_batch(self, trainer: Any, pl_module: Any, batch: RolloutBatch) -> dict[str, float]:
        """Edit ``batch``'s fields in place and return metrics to log."""
        ...


def _run(hooks: Iterable[RolloutBatchHook], trainer: Any, pl_module: Any, batch: RolloutBatch) -> dict[str, float]:
    """Run ``hooks`` on ``batch`` in ``stage`` order; merge their metrics."""
    metrics: dict[str, float] = {}
    for hook in sorted(hooks, key=lambda cb: cb.stage):
        metrics.update(hook.on_rollout_batch(trainer, pl_module, batch))
    return metrics


def shape_rewards(
    hooks: Iterable[RolloutBatchHook], trainer: Any, pl_module: Any, batch: RolloutBatch
) -> dict[str, float]:
    """The hooks before the advantages (``stage`` < :data:`ADVANTAGE_STAGE`): the reward's shaping."""
    return _run([cb for cb in hooks if cb.stage < ADVANTAGE_STAGE], trainer, pl_module, batch)


def compute_advantages(
    hooks: Iterable[RolloutBatchHook], trainer: Any, pl_module: Any, batch: RolloutBatch
) -> dict[str, float]:
    """The estimator's hook and those after it (``stage`` ≥ :data:`ADVANTAGE_STAGE`).

    Raises:
        RuntimeError: no hook wrote ``advantages`` (the update cannot run without them).
    """
    metrics = _run([cb for cb in hooks if cb.stage >= ADVANTAGE_STAGE], trainer, pl_module, batch)
    if batch.advantages is None:
        raise RuntimeError(
            "no callback wrote the batch's advantages: add AdvantageCallback (algorithm."
            "adv_estimator) to the trainer's callbacks"
        )
    return metrics


def apply_rollout_callbacks(
    hooks: Iterable[RolloutBatchHook], trainer: Any, pl_module: Any, batch: RolloutBatch
) -> dict[str, float]:
    """:func:`shape_rewards`, then :func:`compute_advantages`; their metrics merged."""
    hooks = list(hooks)
    metrics = shape_rewards(hooks, trainer, pl_module, batch)
    metrics.update(compute_advantages(hooks, trainer, pl_module, batch))
    return metrics
