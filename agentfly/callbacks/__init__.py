"""Lightning callbacks of an agentfly run.

The swappable algorithm pieces are :class:`RolloutBatchCallback` subclasses: each joins the
module's ``rollout_callbacks`` when the trainer sets up, and the module applies them to each
training batch, :func:`shape_rewards` then :func:`compute_advantages` (see
:mod:`agentfly.callbacks.batch_hooks`, the one hook for a user's own); their math stays in
:mod:`agentfly.estimators`.
"""

from agentfly.callbacks.advantage import AdvantageCallback
from agentfly.callbacks.batch_hooks import (
    ADVANTAGE_STAGE,
    RolloutBatchCallback,
    apply_rollout_callbacks,
    compute_advantages,
    shape_rewards,
)
from agentfly.callbacks.kl_reward import KLRewardCallback

__all__ = [
    "ADVANTAGE_STAGE",
    "AdvantageCallback",
    "KLRewardCallback",
    "RolloutBatchCallback",
    "apply_rollout_callbacks",
    "compute_advantages",
    "shape_rewards",
]
