"""Lightning callbacks of an agentfly run.

The swappable algorithm pieces are :class:`RolloutBatchCallback` subclasses: each joins the
module's ``rollout_callbacks`` when the trainer sets up, and the module applies them to each
training batch through :func:`apply_rollout_callbacks` (see :mod:`agentfly.callbacks.batch_hooks`);
their math stays in :mod:`agentfly.estimators`.
"""

from agentfly.callbacks.advantage import AdvantageCallback
from agentfly.callbacks.batch_hooks import RolloutBatchCallback, apply_rollout_callbacks
from agentfly.callbacks.kl_reward import KLRewardCallback

__all__ = [
    "AdvantageCallback",
    "KLRewardCallback",
    "RolloutBatchCallback",
    "apply_rollout_callbacks",
]
