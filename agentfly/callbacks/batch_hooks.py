"""The rollout-batch callback: where swappable callbacks shape the rewards and write the advantages.

A :class:`RolloutBatchCallback` is a Lightning callback with one more hook,
:meth:`~RolloutBatchCallback.on_rollout_batch`, and a ``stage`` (the module's
:class:`~agentfly.core.batch_hooks.RolloutBatchHook`). It is the one hook for a user's
own batch processing: subclass it, edit the batch's fields in place, return metrics to log, and
give it in ``trainer.callbacks`` (``--trainer.callbacks+=my_pkg.MyHook``). The module holds the
ones it runs in its ``rollout_callbacks`` list: each callback the trainer has adds itself there
in Lightning's ``setup`` hook (before the first batch of a fit or validation) and takes itself
out in ``teardown``, so no one searches the trainer's callbacks.

``AgentRLModule.training_step`` calls them twice per iteration
(:mod:`agentfly.core.batch_hooks`), after the module has filled in the batch's no-grad passes
(``old_log_probs``, ``ref_log_probs``, ``full_kl``, ``values``):

1. :func:`~agentfly.core.batch_hooks.shape_rewards` runs the hooks whose ``stage`` is below :data:`~agentfly.core.batch_hooks.ADVANTAGE_STAGE`: they
   turn ``token_level_scores`` into ``token_level_rewards`` (:class:`KLRewardCallback`, stage 0,
   built from ``algorithm.use_kl_in_reward`` with its KL controller);
2. :func:`~agentfly.core.batch_hooks.compute_advantages` runs the others: the advantage estimator's
   (:class:`AdvantageCallback`, stage :data:`~agentfly.core.batch_hooks.ADVANTAGE_STAGE`, built from
   ``algorithm.adv_estimator``) writes ``advantages`` and ``returns``; a later stage may read or
   change them before the update.

Within each, callbacks run in ``stage`` order whatever the list order (ties in the trainer's
order). Swapping a callback, or the config key that builds it, swaps the algorithm; the math
stays in :mod:`agentfly.estimators`. The fields each callback reads and writes are those of
:class:`~agentfly.core.batch.RolloutBatch`.
"""

from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch.callbacks import Callback

from agentfly.core.batch import RolloutBatch


class RolloutBatchCallback(Callback):
    """A Lightning callback that edits each training batch before the update; lower ``stage``
    runs first, and a stage below :data:`~agentfly.core.batch_hooks.ADVANTAGE_STAGE` runs before the advantages.

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


def to_float(x: torch.Tensor | float) -> float:
    return float(x.detach().item()) if isinstance(x, torch.Tensor) else float(x)
