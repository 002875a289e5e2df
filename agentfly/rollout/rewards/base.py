"""What a reward is: the ``@reward`` decorator, the registry, and the safe call the agent loop uses.

A reward is a plain function registered by name. It is called with keyword arguments only::

    fn(prediction=final_response, trajectory=trajectory, **row_fields)

and receives just the keywords it declares (all of them if it takes ``**kwargs``); a function
that names ``final_response`` instead of ``prediction`` (AgentFly's spelling) gets it under that
name too. It returns a float, or a dict with key ``reward`` plus extra numeric metrics to log.

``compute_reward`` / ``acompute_reward`` never let a reward break a rollout: a reward that raises,
runs past its timeout, kills the process running it, returns something malformed (NaN, a
magnitude beyond float32's range, a string, a dict without ``reward``), needs a row field the
row lacks, or never gets a worker process (``queue_timeout``: the pool is too small) gives no
score: the result has reward 0, ``failed=True`` and an ``error`` saying what happened (its kind
first: ``timeout: ...``), logged once per reward, kind of failure and consequence. The chain is
then failed, not scored 0: the caller says what becomes of it (``consequence``; in training,
``algorithm.failed_chains``: :func:`agentfly.rollout.failures.describe_policy`). An unknown
reward *name* still raises: that is a configuration error, and silently scoring 0 for a whole
run would hide it.

Where a reward runs: a sync reward in a worker process of a
:class:`~agentfly.rollout.execution.workers.WorkerPool` (the one given, else the process's default pool),
killed at its timeout (counted from when a worker takes the call); one declared ``@reward(runs_in="thread")`` (trusted code, or code that
cannot be pickled) in a daemon thread of the package, abandoned at its timeout (a thread cannot
be killed); an async reward on the caller's event loop under ``asyncio.wait_for`` (it must not
block the loop). Rewards must not rely on ``signal.alarm`` (it only works on a main thread): the
built-in math rewards call math-verify with its own signal-based timeouts disabled and rely on
this one.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentfly.core.plugins import PLUGIN_PREFIX
from agentfly.core.registry import Registry
from agentfly.rollout.execution.daemon_threads import THREADS
from agentfly.rollout.execution.function_ref import by_reference
from agentfly.rollout.execution.workers import (
    ReplyTooLarge,
    WorkerDied,
    WorkerPool,
    WorkerQueueTimeout,
    WorkerStartError,
    default_pool,
    describe_error,
    result_of,
    wait_call,
)

if TYPE_CHECKING:
    from agentfly.core.trajectory import Trajectory

logger = logging.getLogger(__name__)

RewardFn = Callable[..., Any]

DEFAULT_TIMEOUT_S = 60.0
"""Timeout of a reward registered without one (seconds)."""

FLOAT32_MAX = 3.4028234663852886e38
"""The largest finite float32: a reward or extra beyond it would overflow the training batch."""

RUNS_IN = ("process", "thread")

NO_POLICY = "it is recorded as failed, with reward 0"
"""What becomes of a failed call's chain when the caller says nothing (a direct call)."""


def _as_reward(obj: Any, spec: str) -> RewardFn:
    """A ``module:attr`` reward: a plain function, registered under the spec (timeout: the default)."""
    if not callable(obj) or isinstance(obj, type):
        raise TypeError(f"expected a reward function, got {obj!r}")
    return reward(name=spec)(obj)


REWARDS: Registry[RewardFn] = Registry("reward", coerce=_as_reward)
_INFOS: dict[str, RewardInfo] = {}  # by registered name, for callables that refuse attributes

_PREDICTION_NAMES = ("prediction", "final_response")
_RESERVED = frozenset((*_PREDICTION_NAMES, "trajectory"))


@dataclass(frozen=True)
class RewardInfo:
    """What ``@reward`` attaches to a function (as ``fn.reward_info``)."""

    name: str
    timeout: float
    runs_in: str = "process"
    preload: tuple[str, ...] = ()
    io_bound: bool = False


@dataclass
class RewardResult:
    """The outcome of one safe reward call.

    Attributes:
        reward: the scalar reward; 0.0 when the call failed.
        extras: extra numeric metrics the reward returned (``acc``, ``f1``...), as floats.
        failed: the reward raised, timed out, returned something malformed, or lacked a field.
        error: what went wrong, prefixed by its kind (``timeout: ...``); None when not failed.
        kind: the kind of failure alone (``timeout``, ``queue_timeout``, ``exception``,
            ``malformed``, ``worker_died``, ``output_too_large``, ``missing_field``,
            ``bad_signature``).
    """

    reward: float
    extras: dict[str, float] = field(default_factory=dict)
    failed: bool = False
    error: str | None = None
    kind: str | None = None

    def metrics(self) -> dict[str, float]:
        """``{"reward": ..., **extras}``, ready to log."""
        return {"reward": self.reward, **self.extras}


class RewardError(Exception):
    """A reward call went wrong.

    ``kind`` is one of ``missing_field``, ``bad_signature``, ``exception``, ``timeout``,
    ``queue_timeout``, ``malformed``, ``worker_died``, ``output_too_large``.
    """

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


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


def runs_in_process(name: str) -> bool:
    """Whether calls of the reward ``name`` go to the worker processes (a sync reward not
    declared ``runs_in="thread"``)."""
    fn = get_reward(name)
    info = _INFOS.get(REWARDS.canonical(name))
    runs_in = info.runs_in if info else "process"
    return runs_in == "process" and not inspect.iscoroutinefunction(fn)


def is_io_bound(name: str) -> bool:
    """Whether the reward ``name`` was declared ``@reward(io_bound=True)``."""
    info = _INFOS.get(REWARDS.canonical(name))
    return bool(info and info.io_bound)


def worker_imports(name: str) -> list[str]:
    """Modules a worker process imports at start for the reward ``name``: its own module and
    what it declares with ``preload``."""
    fn = get_reward(name)
    info = _INFOS.get(REWARDS.canonical(name))
    module = getattr(fn, "__module__", None)
    # a plug-in file's module (agentfly.core.plugins names it agentfly_plugin_*) cannot be imported by
    # name: the worker imports the file itself before the call (plugins.plugin_files)
    own = [module] if module and module != "__main__" and not module.startswith(PLUGIN_PREFIX) else []
    return [*own, *(info.preload if info else ())]


def reward_name_of(fn: RewardFn) -> str:
    """The registered name of ``fn``, else its ``__name__``."""
    info = getattr(fn, "reward_info", None)
    return info.name if isinstance(info, RewardInfo) else getattr(fn, "__name__", repr(fn))


def bind_reward_kwargs(
    fn: RewardFn, prediction: str, trajectory: Trajectory | None, row: Mapping[str, Any]
) -> dict[str, Any]:
    """The keyword arguments ``fn`` is called with.

    ``prediction`` and ``trajectory`` take precedence over row fields of the same name. A data
    module can call this once on its first row to fail fast on a reward/dataset mismatch.

    Raises:
        RewardError: (kind ``missing_field``) ``fn`` requires an argument the row lacks; the
            message names the field and the reward.
    """
    available: dict[str, Any] = {k: v for k, v in row.items() if k not in _RESERVED}
    available.update(prediction=prediction, final_response=prediction, trajectory=trajectory)
    params = inspect.signature(fn).parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        # ``final_response`` is only a spelling of ``prediction``; don't hand both to **kwargs
        # unless the function names it.
        named = {p.name for p in params}
        return {k: v for k, v in available.items() if k != "final_response" or k in named}
    kwargs: dict[str, Any] = {}
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.POSITIONAL_ONLY):
            if p.kind is p.POSITIONAL_ONLY and p.default is p.empty:
                raise RewardError(
                    "bad_signature",
                    f"reward {reward_name_of(fn)!r} has a positional-only parameter "
                    f"{p.name!r}; rewards are called with keyword arguments only",
                )
            continue
        if p.name in available:
            kwargs[p.name] = available[p.name]
        elif p.default is p.empty:
            raise RewardError(
                "missing_field",
                f"reward {reward_name_of(fn)!r} requires field {p.name!r}, which the data row "
                f"lacks (row fields: {', '.join(sorted(row)) or 'none'})",
            )
    return kwargs


def normalize_reward_output(value: Any) -> tuple[float, dict[str, float]]:
    """Turn a reward's return value into ``(reward, extras)``.

    Non-numeric or non-finite extras are dropped (they cannot be averaged into a metric).

    Raises:
        RewardError: (kind ``malformed``) not a finite number nor a dict with a finite ``reward``,
            or a reward or extra whose magnitude exceeds float32's largest finite value.
    """
    if isinstance(value, Mapping):
        if "reward" not in value:
            raise RewardError(
                "malformed", f"returned a dict without 'reward' (keys: {sorted(map(str, value))})"
            )
        extras = {}
        for key, extra in value.items():
            if key == "reward":
                continue
            number = _as_float(extra)
            if number is not None and math.isfinite(number):
                extras[str(key)] = _within_float32(number, f"extra {str(key)!r}")
        return _finite(value["reward"]), extras
    return _finite(value), {}


def _as_float(value: Any) -> float | None:
    if value is None or isinstance(value, str | bytes):
        return None
    try:
        return float(value)  # int, bool, numpy and 0-d torch scalars
    except (TypeError, ValueError):
        return None


def _finite(value: Any) -> float:
    number = _as_float(value)
    if number is None:
        raise RewardError(
            "malformed", f"returned {type(value).__name__} {value!r:.80}, not a number"
        )
    if not math.isfinite(number):
        raise RewardError("malformed", f"returned a non-finite reward {number}")
    return _within_float32(number, "reward")


def _within_float32(number: float, what: str) -> float:
    if abs(number) > FLOAT32_MAX:
        raise RewardError(
            "malformed",
            f"returned {what} {number!r}, beyond float32's range (|x| <= {FLOAT32_MAX:.4g})",
        )
    return number


_logged: set[tuple[str, str, str]] = set()
_logged_lock = threading.Lock()


def _failure(name: str, kind: str, message: str, consequence: str = NO_POLICY) -> RewardResult:
    error = f"{kind}: {message}"
    with _logged_lock:
        first = (name, kind, consequence) not in _logged
        _logged.add((name, kind, consequence))
    if first:
        logger.warning(
            "reward %r failed (%s): the chain gets no score; %s. Further %s failures of this "
            "reward are not logged.",
            name,
            error,
            consequence,
            kind,
        )
    return RewardResult(reward=0.0, failed=True, error=error, kind=kind)


def _resolve(
    name_or_fn: str | RewardFn, timeout: float | None
) -> tuple[RewardFn, str, float, str]:
    if isinstance(name_or_fn, str):
        fn = get_reward(name_or_fn)
        info = _INFOS.get(REWARDS.canonical(name_or_fn))
    else:
        fn = name_or_fn
        info = getattr(fn, "reward_info", None)
    info = info if isinstance(info, RewardInfo) else None
    name = info.name if info else reward_name_of(fn)
    if timeout is None:
        timeout = info.timeout if info else DEFAULT_TIMEOUT_S
    if not timeout > 0:
        raise ValueError(f"reward timeout must be positive, got {timeout!r}")
    return fn, name, timeout, info.runs_in if info else "process"


def call_reward(fn: RewardFn, kwargs: dict[str, Any]) -> Any:
    """``fn(**kwargs)``, an awaitable result run to its end (in a worker or a daemon thread)."""
    out = fn(**kwargs)
    if inspect.isawaitable(out):
        out = asyncio.run(_await(out))
    return out


async def _await(awaitable: Any) -> Any:
    return await awaitable


def _run_async(fn: RewardFn, kwargs: dict[str, Any], limit: float) -> Any:
    return asyncio.run(asyncio.wait_for(fn(**kwargs), limit))


def _submit(
    fn: RewardFn, kwargs: dict[str, Any], runs_in: str, name: str, limit: float,
    workers: WorkerPool | None,
) -> Any:
    """The future of a sync reward's call: on a daemon thread, or in a worker process."""
    if runs_in == "thread":
        return THREADS.submit(call_reward, fn, kwargs)
    return _pool(workers).submit(
        call_reward, (by_reference(fn), kwargs), timeout=limit, label=f"reward {name!r}"
    )


def _pool(workers: WorkerPool | None) -> WorkerPool:
    return workers if workers is not None else default_pool()


def _from_exception(
    name: str, exc: BaseException, timeout: float, consequence: str = NO_POLICY
) -> RewardResult:
    if isinstance(exc, WorkerStartError):
        raise exc
    if isinstance(exc, RewardError):
        kind, message = exc.kind, str(exc)
    elif isinstance(exc, WorkerQueueTimeout):
        kind, message = "queue_timeout", str(exc)
    elif isinstance(exc, TimeoutError | asyncio.TimeoutError):
        kind, message = "timeout", f"did not return within {timeout:g} s"
    elif isinstance(exc, WorkerDied):
        kind, message = "worker_died", f"the process running it died ({exc.how})"
    elif isinstance(exc, ReplyTooLarge):
        kind, message = "output_too_large", str(exc)
    else:
        kind, message = "exception", describe_error(exc)
    return _failure(name, kind, message, consequence)


def _from_value(name: str, value: Any, consequence: str = NO_POLICY) -> RewardResult:
    try:
        reward_value, extras = normalize_reward_output(value)
    except RewardError as exc:
        return _failure(name, exc.kind, f"reward {name!r} {exc}", consequence)
    return RewardResult(reward=reward_value, extras=extras)


def compute_reward(
    name_or_fn: str | RewardFn,
    prediction: str,
    trajectory: Trajectory | None = None,
    row: Mapping[str, Any] | None = None,
    timeout: float | None = None,
    workers: WorkerPool | None = None,
    consequence: str = NO_POLICY,
) -> RewardResult:
    """Score one response safely (blocking); see the module docstring for the failure rules.

    Args:
        name_or_fn: a registered reward name or alias, or a reward function.
        prediction: the chain's final response.
        trajectory: the chain (the reward may look at its tool calls and messages).
        row: the data row; its fields become keyword arguments.
        timeout: seconds the call may run before it fails; default: the reward's own.
        workers: the worker pool of sync rewards (None: the process's default pool).
        consequence: what becomes of the chain when the call fails, for the warning (the
            agent loop's ``algorithm.failed_chains``).

    Returns:
        The reward, its extras, and whether (and why) it failed. Returns within about
        ``timeout`` seconds whatever the reward does, once a worker has taken the call (the
        pool's ``queue_timeout`` bounds the wait for one).

    Raises:
        UnknownNameError: ``name_or_fn`` names no registered reward.
        WorkerStartError: the worker pool cannot start a worker (every call would fail alike).
    """
    fn, name, limit, runs_in = _resolve(name_or_fn, timeout)
    try:
        kwargs = bind_reward_kwargs(fn, prediction, trajectory, row or {})
    except RewardError as exc:
        return _failure(name, exc.kind, str(exc), consequence)
    try:
        if inspect.iscoroutinefunction(fn):  # on a thread, in a loop of its own
            value = result_of(THREADS.submit(_run_async, fn, kwargs, limit), limit, pool=None)
        else:
            future = _submit(fn, kwargs, runs_in, name, limit, workers)
            value = result_of(future, limit, pool=_pool(workers) if runs_in == "process" else None)
    except Exception as exc:
        return _from_exception(name, exc, limit, consequence)
    return _from_value(name, value, consequence)


async def acompute_reward(
    name_or_fn: str | RewardFn,
    prediction: str,
    trajectory: Trajectory | None = None,
    row: Mapping[str, Any] | None = None,
    timeout: float | None = None,
    workers: WorkerPool | None = None,
    consequence: str = NO_POLICY,
) -> RewardResult:
    """Async ``compute_reward`` for the agent loop: a sync reward runs off the event loop.

    A coroutine reward is awaited on the loop under the timeout; a plain one runs in a worker
    process (or a daemon thread, ``runs_in="thread"``; never the loop's default executor, whose
    threads ``asyncio.run`` would wait for at exit if a reward hung). Same arguments, result
    and failure rules as ``compute_reward``.
    """
    fn, name, limit, runs_in = _resolve(name_or_fn, timeout)
    try:
        kwargs = bind_reward_kwargs(fn, prediction, trajectory, row or {})
    except RewardError as exc:
        return _failure(name, exc.kind, str(exc), consequence)
    try:
        if inspect.iscoroutinefunction(fn):
            value = await asyncio.wait_for(fn(**kwargs), timeout=limit)
        else:
            future = _submit(fn, kwargs, runs_in, name, limit, workers)
            pool = _pool(workers) if runs_in == "process" else None
            value = await wait_call(future, limit, pool=pool)
    except Exception as exc:  # CancelledError is not an Exception: cancelling the caller works
        return _from_exception(name, exc, limit, consequence)
    return _from_value(name, value, consequence)


def score_trajectory(
    name_or_fn: str | RewardFn,
    trajectory: Trajectory,
    timeout: float | None = None,
    workers: WorkerPool | None = None,
) -> RewardResult:
    """Score ``trajectory`` (its final response and row) and record the result on it."""
    result = compute_reward(
        name_or_fn, trajectory.final_response, trajectory, trajectory.row, timeout, workers
    )
    _record(trajectory, result)
    return result


async def ascore_trajectory(
    name_or_fn: str | RewardFn,
    trajectory: Trajectory,
    timeout: float | None = None,
    workers: WorkerPool | None = None,
    consequence: str = NO_POLICY,
) -> RewardResult:
    """Async ``score_trajectory``."""
    result = await acompute_reward(
        name_or_fn, trajectory.final_response, trajectory, trajectory.row, timeout, workers,
        consequence,
    )
    _record(trajectory, result)
    return result


def _record(trajectory: Trajectory, result: RewardResult) -> None:
    trajectory.reward = result.reward
    trajectory.reward_extras = dict(result.extras)
    trajectory.reward_failed = result.failed
    trajectory.reward_error = result.kind
    if result.failed:
        trajectory.error = trajectory.error or f"reward {result.error}"
