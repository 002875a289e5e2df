"""Running an in-process engine on the thread that trains: :func:`run_sync`.

With an in-process pool the rollout's event loop runs in a helper thread while the calling
thread runs the engine's calls, so all torch work of a training process (rollout and update)
stays on one thread. A second thread doing torch work would get a second OpenMP thread team;
with more OpenMP threads than cores libgomp stops spinning between parallel regions and wakes
its threads through the kernel for each one, which a small model's decode step is made of
(figures in bench/README.md).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import queue
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from agentfly.rollout.execution.daemon_threads import THREADS

T = TypeVar("T")


class CallerThread:
    """Calls handed over by other threads, run one at a time on the thread that calls :meth:`serve`."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._open = True

    def submit(self, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            if self._open:
                self._jobs.put((future, fn, args))
                return future
        future.set_exception(RuntimeError("the thread that ran the engine has stopped serving it"))
        return future

    def close(self) -> None:
        """Let :meth:`serve` return once the calls queued so far have run."""
        self._jobs.put(None)

    def abandon(self) -> None:
        """Fail every queued and later call: the serving thread is leaving (an interrupt)."""
        with self._lock:
            self._open = False
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                return
            if job is not None and job[0].set_running_or_notify_cancel():
                job[0].set_exception(RuntimeError("the rollout was interrupted"))

    def serve(self) -> None:
        """Run submitted calls until :meth:`close`; their results and errors go to their futures."""
        while (job := self._jobs.get()) is not None:
            future, fn, args = job
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args))
                except Exception as exc:
                    future.set_exception(exc)
            del job, future, fn, args


class InProcessCalls:
    """Where an in-process engine's blocking calls run.

    On the thread inside :func:`run_sync` while one serves (at most one at a time), else on one
    of the package's daemon threads (:data:`agentfly.rollout.execution.daemon_threads.THREADS`).
    """

    def __init__(self) -> None:
        self.caller: CallerThread | None = None
        self._lock = threading.Lock()

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` on the serving thread, or on a daemon thread when none serves."""
        caller = self.caller
        future = caller.submit(fn, *args) if caller is not None else THREADS.submit(fn, *args)
        return await asyncio.wrap_future(future)

    def claim(self) -> CallerThread | None:
        """A fresh :class:`CallerThread` that calls go to, or None when one already serves."""
        with self._lock:
            if self.caller is not None:
                return None
            self.caller = CallerThread()
            return self.caller

    def release(self) -> None:
        self.caller = None


def run_sync(engine: Any, coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)`` for code that calls ``engine``; an in-process engine generates here.

    An engine with ``in_process_calls`` (an :class:`~agentfly.rollout.engines.pool.EnginePool`
    holding one in-process engine) runs its calls on this thread while the event loop runs in a
    helper thread. Engines in other processes (Ray), or a pool already serving another call of
    this function, are called from the loop's own thread (``asyncio.run``).
    """
    calls: InProcessCalls | None = getattr(engine, "in_process_calls", None)
    caller = calls.claim() if calls is not None else None
    if caller is None:
        return asyncio.run(coro)
    assert calls is not None
    box: dict[str, Any] = {}

    async def main() -> T:
        box["loop"], box["task"] = asyncio.get_running_loop(), asyncio.current_task()
        return await coro

    def loop_thread() -> None:
        try:
            box["result"] = asyncio.run(main())
        except BaseException as exc:  # handed to the calling thread
            box["error"] = exc
        finally:
            caller.close()

    thread = threading.Thread(target=loop_thread, name="agentfly-rollout-loop", daemon=True)
    thread.start()
    try:
        caller.serve()
    except BaseException:  # e.g. KeyboardInterrupt: end the rollout, then pass it on
        caller.abandon()
        with contextlib.suppress(RuntimeError, KeyError):  # no loop yet, or already closed
            box["loop"].call_soon_threadsafe(box["task"].cancel)
        thread.join(timeout=30)
        raise
    finally:
        calls.release()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["result"]
