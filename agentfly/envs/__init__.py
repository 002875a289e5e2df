"""Environments, gymnasium-shaped for text, one per file; they import only :mod:`agentfly.core`.

:mod:`~agentfly.envs.base` holds the interface (:class:`~agentfly.envs.base.Env`,
:class:`~agentfly.envs.base.StepResult`, the typed errors, the registry and
:func:`~agentfly.envs.base.get_env`); :mod:`~agentfly.envs.process` runs any of them in a killable
process of its own under deadlines. Shipped: ``textworld``, ``scienceworld``, ``webshop``,
``alfworld``, ``chess_puzzle``, ``openenv``, ``reasoning_gym`` and ``gui`` (a synthetic screen of
buttons and shapes, its screenshots PNG bytes; tasks from :mod:`~agentfly.envs.gui_tasks`). Each imports its third-party
package only when an environment is made, so this package imports in milliseconds.
"""

from agentfly.envs.base import (
    ENVS,
    Env,
    EnvClosed,
    EnvCrashed,
    EnvError,
    EnvRaised,
    EnvTimeout,
    EnvUnavailable,
    EnvUsageError,
    StepResult,
    get_env,
    register_env,
)

__all__ = [
    "ENVS",
    "Env",
    "EnvClosed",
    "EnvCrashed",
    "EnvError",
    "EnvRaised",
    "EnvTimeout",
    "EnvUnavailable",
    "EnvUsageError",
    "StepResult",
    "get_env",
    "register_env",
]
