"""Waiting for a call's future, from async or sync code, never past the call's own bounds."""

from __future__ import annotations

import concurrent.futures
from typing import Any

from agentfly.rollout.execution.worker_errors import WorkerTimeout

_GRACE_S = 5.0  # callers' own wait beyond a deadline, should the manager thread be gone


def settle(
    future: concurrent.futures.Future[Any], value: Any = None, error: BaseException | None = None
) -> None:
    if future.done():
        return
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)
    except concurrent.futures.InvalidStateError:  # cancelled meanwhile
        pass


async def wait_call(
    future: concurrent.futures.Future[Any], timeout: float, *, pool: Any
) -> Any:
    """Await a call's future from any event loop.

    A pool's future (``pool`` given) is settled by the pool: within ``pool.queue_timeout``
    waiting for a worker plus ``timeout`` running; this waits a few seconds longer only should
    the pool's own thread be gone. A thread's future (``pool=None``) is abandoned at
    ``timeout``.
    """
    import asyncio

    try:
        return await asyncio.wait_for(asyncio.wrap_future(future), _longest_wait(timeout, pool))
    except asyncio.TimeoutError as e:
        if future.done():  # the pool's own WorkerTimeout
            raise
        raise WorkerTimeout(f"no answer within {timeout:g} s") from e


def result_of(
    future: concurrent.futures.Future[Any], timeout: float, *, pool: Any
) -> Any:
    """:func:`wait_call` from sync code."""
    try:
        return future.result(_longest_wait(timeout, pool))
    except concurrent.futures.TimeoutError as e:
        if future.done():  # the call's own timeout
            raise
        raise WorkerTimeout(f"no answer within {timeout:g} s") from e


def _longest_wait(timeout: float, pool: Any) -> float:
    return timeout if pool is None else pool.queue_timeout + timeout + _GRACE_S
