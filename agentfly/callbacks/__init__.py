"""Lightning callbacks that apply swappable algorithm pieces to a rollout batch.

A rollout batch is a dict of tensors (keys named in :mod:`agentfly.callbacks.batch_hooks`). The
LightningModule calls :func:`run_batch_hooks` once per batch, after it has filled in the
reference log-probabilities and critic values; each callback with an ``on_rollout_batch`` hook
then edits the batch in ``stage`` order (reward shaping before advantages). Swapping a callback,
or the config key that builds it, swaps the algorithm; the math stays in ``agentfly.estimators``.
"""

from agentfly.callbacks.advantage import AdvantageCallback
from agentfly.callbacks.batch_hooks import BatchHook, run_batch_hooks
from agentfly.callbacks.kl_reward import KLRewardCallback

__all__ = ["AdvantageCallback", "BatchHook", "KLRewardCallback", "run_batch_hooks"]
