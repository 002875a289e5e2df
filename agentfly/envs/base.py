"""The environment interface: gymnasium's shape, for text.

``reset(task, seed) -> (observation, info)`` starts an episode of the task a data row describes;
``info`` holds the task's ``goal`` and, where the environment knows them, its
``admissible_actions``. ``step(action) -> StepResult`` plays one action given as text. An
environment is made once per chain and closed when the chain ends (:meth:`Env.close`, also as a
context manager); :class:`agentfly.envs.process.ProcessEnv` runs one in a process of its own,
under deadlines.

Images: an environment that shows a screen (:mod:`agentfly.envs.gui`) gives it as PNG bytes,
agentfly's one image type: after a step in ``StepResult.images``, at ``reset`` under
``info["images"]`` (a list of PNG bytes; the one key of ``info`` that is not JSON, which
:class:`agentfly.rollout.tools.environment.EnvSession` takes out before it records the episode).
Text environments give none.

Departures from gymnasium: observations and actions are text (with images beside the text where
the environment has a screen), the task comes from the data row
(a dict) rather than from the environment's own sampling, and stepping an episode that is over is
an :class:`EnvUsageError` instead of undefined behaviour.

Environments are registered by name (:func:`register_env`) and found with :func:`get_env`, which
also takes a ``module:attr`` spec of a user's own class.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from agentfly.core.registry import Registry


@dataclass
class StepResult:
    """What one ``step`` returns.

    Attributes:
        observation: the text the environment shows after the action.
        reward: the reward of this step alone (episode return = the sum over steps).
        terminated: the episode reached an end of its own (won, lost, bought, solved).
        truncated: the episode was cut short by a step limit.
        info: extra facts (``score``, ``won``, ``admissible_actions``...), JSON-serializable.
        images: what the environment shows after the action, as PNG bytes (a GUI's screenshot);
            empty for a text environment.
    """

    observation: str
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    images: list[bytes] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated


class EnvError(RuntimeError):
    """An environment that cannot go on; ``kind`` says how it failed (for counting)."""

    kind: ClassVar[str] = "error"


class EnvUnavailable(EnvError):
    """The environment cannot start here: a missing package, program or data; says how to get it."""

    kind = "unavailable"


class EnvTimeout(EnvError, TimeoutError):
    """A call passed its deadline; the environment's process was killed."""

    kind = "timeout"


class EnvCrashed(EnvError):
    """The environment's process died during a call (exit code or signal in the message)."""

    kind = "crashed"


class EnvRaised(EnvError):
    """The environment's own code raised; ``type_name`` and the traceback are kept."""

    kind = "raised"

    def __init__(self, message: str, type_name: str = "", traceback: str = "") -> None:
        super().__init__(message)
        self.type_name = type_name
        self.traceback = traceback


class EnvClosed(EnvError):
    """A call on an environment that was closed (or killed after a failure)."""

    kind = "closed"


class EnvUsageError(EnvError):
    """The caller's mistake (step before reset, step after the end, a bad task row); the
    environment itself is fine and stays usable."""

    kind = "usage"


class Env:
    """Base of every environment: the episode bookkeeping around ``_reset`` and ``_step``.

    Subclasses implement ``_reset(task, seed) -> (observation, info)`` and
    ``_step(action) -> StepResult``, and ``close()`` when they hold a process or a file.

    Args:
        max_steps: steps after which an episode is truncated (None: no limit of agentfly's own).
    """

    name: ClassVar[str] = "env"

    def __init__(self, max_steps: int | None = None) -> None:
        if max_steps is not None and max_steps < 1:
            raise ValueError(f"max_steps must be at least 1 or None, got {max_steps}")
        self.max_steps = max_steps
        self.steps = 0
        self._episode = "none"  # none | running | over

    def reset(self, task: Mapping[str, Any] | None = None, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        """Start an episode of ``task`` (a data row's fields); returns the first observation and
        an info dict with ``goal`` and, where known, ``admissible_actions`` (and ``images``, the
        first screen as PNG bytes, where the environment has one)."""
        observation, info = self._reset(dict(task or {}), seed)
        self.steps = 0
        self._episode = "running"
        return observation, info

    def step(self, action: str) -> StepResult:
        """Play ``action``; past ``max_steps`` the episode is truncated."""
        if self._episode == "none":
            raise EnvUsageError(f"{self.name}: step() before reset()")
        if self._episode == "over":
            raise EnvUsageError(f"{self.name}: the episode is over; reset() starts another")
        if not isinstance(action, str):
            raise EnvUsageError(f"{self.name}: an action is text, got {type(action).__name__}")
        result = self._step(action)
        self.steps += 1
        if not result.terminated and self.max_steps is not None and self.steps >= self.max_steps:
            result.truncated = True
        if result.done:
            self._episode = "over"
        return result

    def close(self) -> None:
        """Release what the environment holds (a process, a connection). Idempotent."""

    def _reset(self, task: dict[str, Any], seed: int | None) -> tuple[str, dict[str, Any]]:
        raise NotImplementedError

    def _step(self, action: str) -> StepResult:
        raise NotImplementedError

    def __enter__(self) -> Env:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def require(task: Mapping[str, Any], key: str, env: str) -> Any:
    """``task[key]``, or an :class:`EnvUsageError` naming the environment and the fields given."""
    if key not in task or task[key] is None:
        raise EnvUsageError(f"{env}: the task row needs a {key!r} field (it has {sorted(task)})")
    return task[key]


def _coerce_env(obj: Any, spec: str) -> type[Env]:
    if isinstance(obj, type) and issubclass(obj, Env):
        return obj
    raise TypeError(f"an environment is a subclass of agentfly.envs.base.Env, got {obj!r}")


ENVS: Registry[type[Env]] = Registry("environment", coerce=_coerce_env)

BUILTIN_MODULES = (
    "textworld", "scienceworld", "webshop", "alfworld", "chess", "openenv", "reasoning_gym", "gui",
)
"""The modules of ``agentfly.envs`` that register the shipped environments (each imports its
third-party package only when an environment is made)."""


def register_env(name: str):
    """Class decorator: register an :class:`Env` subclass under ``name``."""

    def decorator(cls: type[Env]) -> type[Env]:
        cls.name = name
        ENVS.register(name, cls)
        return cls

    return decorator


def get_env(name: str) -> type[Env]:
    """The environment class called ``name`` (or named by a ``module:attr`` spec)."""
    for module in BUILTIN_MODULES:
        importlib.import_module(f"agentfly.envs.{module}")
    return ENVS.get(name)
