"""The ``@reward`` decorator and the registry: a reward is a plain function registered by name.

What ``@reward`` declares besides the name (the timeout, where a sync reward runs, the modules a
worker process preloads, whether calls mostly wait) is kept as a :class:`RewardInfo`, read by the
safe call (:mod:`agentfly.rollout.rewards.call`) and by the rollout runner when it sizes and
starts the worker pool.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentfly.core.plugins import PLUGIN_PREFIX
from agentfly.core.registry import Registry

RewardFn = Callable[..., Any]

DEFAULT_TIMEOUT_S = 60.0
"""Timeout of a reward registered without one (seconds)."""

RUNS_IN = ("process", "thread")


def _as_reward(obj: Any, spec: str) -> RewardFn:
    """A ``module:attr`` reward: a plain function, registered under the spec (timeout: the default)."""
    if not callable(obj) or isinstance(obj, type):
        raise TypeError(f"expected a reward function, got {obj!r}")
    return reward(name=spec)(obj)


REWARDS: Registry[RewardFn] = Registry("reward", coerce=_as_reward)
_INFOS: dict[str, RewardInfo] = {}  # by registered name, for callables that refuse attributes


@dataclass(frozen=True)
class RewardInfo:
    """What ``@reward`` attaches to a function (as ``fn.reward_info``)."""

    name: str
    timeout: float
    runs_in: str = "process"
    preload: tuple[str, ...] = ()
    io_bound: bool = False


def reward(
    name: str | RewardFn | None = None,
    *,
    timeout: float | None = None,
    aliases: tuple[str, ...] = (),
    runs_in: str = "process",
    preload: tuple[str, ...] = (),
    io_bound: bool = False,
) -> Callable[[RewardFn], RewardFn]:
    """Register a reward function under ``name`` (default: the function's name).

    Usable as ``@reward(name=...)``, ``@reward("name")`` or bare ``@reward``.

    Args:
        name: the name configs use (``agent.init_config.reward_name``).
        timeout: seconds a call may run before it fails (not counting its wait for a worker
            process); default ``DEFAULT_TIMEOUT_S``.
        aliases: other names that resolve to the same reward.
        runs_in: where a sync reward runs: ``"process"`` (a worker process, killed at the
            timeout) or ``"thread"`` (a daemon thread of the trainer, for trusted code or code
            that cannot be pickled; abandoned at the timeout, not stopped).
        preload: modules the reward imports on its first call (a heavy dependency), which
            worker processes import when they start instead.
        io_bound: a call mostly waits (a judge model behind HTTP) instead of computing: with
            ``agent.run_config.workers.num_workers`` unset, the worker pool gets a worker per
            chain in flight instead of one per CPU core.

    Returns:
        A decorator that registers the function and returns it unchanged (still directly
        callable), with ``fn.reward_info`` set.

    Raises:
        ValueError: ``name`` or an alias is already registered to a different function, or
            ``timeout`` is not positive.

    Example:
        >>> @reward(name="length_penalty")
        ... def length_penalty(prediction: str, max_chars: int = 100) -> float:
        ...     return -max(0, len(prediction) - max_chars) / max_chars
    """
    if callable(name):  # bare @reward
        return reward(
            timeout=timeout, aliases=aliases, runs_in=runs_in, preload=preload, io_bound=io_bound
        )(name)
    if timeout is not None and not timeout > 0:
        raise ValueError(f"reward timeout must be positive, got {timeout!r}")
    if runs_in not in RUNS_IN:
        raise ValueError(f"runs_in must be one of {', '.join(RUNS_IN)}, got {runs_in!r}")

    def decorator(fn: RewardFn) -> RewardFn:
        if not callable(fn):
            raise TypeError(f"@reward needs a callable, got {fn!r}")
        reward_name = name or getattr(fn, "__name__", None)
        if not reward_name:
            raise ValueError(f"@reward needs a name for {fn!r}")
        REWARDS.register(reward_name, fn, aliases=aliases)
        info = RewardInfo(
            reward_name, timeout or DEFAULT_TIMEOUT_S, runs_in, tuple(preload), bool(io_bound)
        )
        _INFOS[reward_name] = info
        with contextlib.suppress(AttributeError):  # e.g. a bound method
            fn.reward_info = info
        return fn

    return decorator


def get_reward(name: str) -> RewardFn:
    """The reward function registered under ``name`` (or an alias).

    Raises:
        UnknownNameError: no such reward; the message lists the known ones.
    """
    return REWARDS.get(name)


def info_of(name_or_fn: str | RewardFn) -> tuple[RewardFn, RewardInfo | None]:
    """The reward function a name or alias resolves to (a function: itself), and what ``@reward``
    declared for it (None: a function never registered).

    Raises:
        UnknownNameError: ``name_or_fn`` is a name no reward is registered under.
    """
    if isinstance(name_or_fn, str):
        return get_reward(name_or_fn), _INFOS.get(REWARDS.canonical(name_or_fn))
    info = getattr(name_or_fn, "reward_info", None)
    return name_or_fn, info if isinstance(info, RewardInfo) else None


def runs_in_process(name: str) -> bool:
    """Whether calls of the reward ``name`` go to the worker processes (a sync reward not
    declared ``runs_in="thread"``)."""
    fn, info = info_of(name)
    runs_in = info.runs_in if info else "process"
    return runs_in == "process" and not inspect.iscoroutinefunction(fn)


def is_io_bound(name: str) -> bool:
    """Whether the reward ``name`` was declared ``@reward(io_bound=True)``."""
    info = _INFOS.get(REWARDS.canonical(name))
    return bool(info and info.io_bound)


def worker_imports(name: str) -> list[str]:
    """Modules a worker process imports at start for the reward ``name``: its own module and
    what it declares with ``preload``."""
    fn, info = info_of(name)
    module = getattr(fn, "__module__", None)
    # a plug-in file's module (agentfly.core.plugins names it agentfly_plugin_*) cannot be imported by
    # name: the worker imports the file itself before the call (plugins.plugin_files)
    own = [module] if module and module != "__main__" and not module.startswith(PLUGIN_PREFIX) else []
    return [*own, *(info.preload if info else ())]


def reward_name_of(fn: RewardFn) -> str:
    """The registered name of ``fn``, else its ``__name__``."""
    info = getattr(fn, "reward_info", None)
    return info.name if isinstance(info, RewardInfo) else getattr(fn, "__name__", repr(fn))
