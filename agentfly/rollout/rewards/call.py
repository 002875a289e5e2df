"""The safe reward call the agent loop uses: ``compute_reward`` / ``acompute_reward``.

They never let a reward break a rollout: a reward that raises, runs past its timeout, kills the
process running it, returns something malformed (:func:`~agentfly.rollout.rewards.result.normalize_reward_output`),
needs a row field the row lacks (:func:`~agentfly.rollout.rewards.arguments.bind_reward_kwargs`),
or never gets a worker process (``queue_timeout``: the pool is too small) gives no score: the
result has reward 0, ``failed=True`` and an ``error`` saying what happened (its kind first:
``timeout: ...``), logged once per reward, kind of failure and consequence. The chain is then
failed, not scored 0: the caller says what becomes of it (``consequence``; in training,
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
import inspect
import logging
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

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
from agentfly.rollout.rewards.arguments import bind_reward_kwargs
from agentfly.rollout.rewards.registry import (
    DEFAULT_TIMEOUT_S,
    RewardFn,
    info_of,
    reward_name_of,
)
from agentfly.rollout.rewards.result import (
    RewardError,
    RewardResult,
    normalize_reward_output,
    reward_turn_rewards,
)

if TYPE_CHECKING:
    from agentfly.core.trajectory import Trajectory

logger = logging.getLogger(__name__)

NO_POLICY = "it is recorded as failed, with reward 0"
"""What becomes of a failed call's chain when the caller says nothing (a direct call)."""


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
    """The function, its name, the call's time limit and where a sync call runs."""
    fn, info = info_of(name_or_fn)
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


def _from_value(
    name: str, value: Any, consequence: str = NO_POLICY, trajectory: Any = None
) -> RewardResult:
    try:
        reward_value, extras = normalize_reward_output(value)
        turns = reward_turn_rewards(value, getattr(trajectory, "num_turns", None))
    except RewardError as exc:
        return _failure(name, exc.kind, f"reward {name!r} {exc}", consequence)
    return RewardResult(reward=reward_value, extras=extras, turn_rewards=turns)


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
    return _from_value(name, value, consequence, trajectory)


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
    return _from_value(name, value, consequence, trajectory)


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
    if result.turn_rewards:  # the reward function's word on each turn replaces the tools' rewards
        trajectory.turn_rewards = [float(r) for r in result.turn_rewards]
    trajectory.reward_failed = result.failed
    trajectory.reward_error = result.kind
    if result.failed:
        trajectory.error = trajectory.error or f"reward {result.error}"
