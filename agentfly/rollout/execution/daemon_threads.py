"""Reusable daemon threads: the package's one pool of threads for blocking calls.

:data:`THREADS` runs code declared safe to share the trainer's process (``runs_in="thread"``
tools and rewards), stateful tools' resource calls, an in-process engine's calls outside
:func:`~agentfly.rollout.engines.caller_thread.run_sync`, and the code reward's test cases. A
hung call keeps its thread, but never blocks the interpreter's exit or ``asyncio.run``'s
shutdown (asyncio's default executor would).
"""

from __future__ import annotations

import concurrent.futures
import os
import queue
import threading
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["THREADS", "DaemonThreads"]

_Task = tuple[concurrent.futures.Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class DaemonThreads:
    """Reusable daemon threads: a call takes an idle thread or starts one.

    A thread stuck in a call that never returns stays stuck (its caller has had its timeout)
    and is not reused. After a fork the child starts afresh (threads do not survive a fork).
    """

    def __init__(self, name: str = "agentfly-call") -> None:
        self._name = name
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._tasks: queue.SimpleQueue[_Task] = queue.SimpleQueue()
        self._idle = 0  # threads waiting for a task and not yet promised one

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        """Run ``fn(*args, **kwargs)`` on a thread; the future holds its result or exception."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            if self._pid != os.getpid():
                self._reset()
            start = self._idle == 0
            if not start:
                self._idle -= 1  # that thread is now promised this task
            self._tasks.put((future, fn, args, kwargs))
        if start:
            threading.Thread(target=self._work, name=self._name, daemon=True).start()
        return future

    def map(self, fn: Callable[[Any], Any], items: Iterable[Any], *, max_parallel: int) -> list[Any]:
        """``[fn(item) for item in items]``, at most ``max_parallel`` calls running at once.

        Returns once every call has ended; the first error, in item order, is raised then.
        """
        gate = threading.Semaphore(max(1, max_parallel))
        futures: list[concurrent.futures.Future[Any]] = []
        for item in items:
            gate.acquire()
            future = self.submit(fn, item)
            future.add_done_callback(lambda _: gate.release())
            futures.append(future)
        concurrent.futures.wait(futures)
        return [f.result() for f in futures]

    def _work(self) -> None:
        tasks = self._tasks
        while True:
            future, fn, args, kwargs = tasks.get()
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args, **kwargs))
                except BaseException as exc:  # reported through the future, never lost
                    future.set_exception(exc)
            del future, fn, args, kwargs
            with self._lock:
                if tasks is not self._tasks:  # a fork replaced the queue: this thread is stale
                    return
                self._idle += 1


THREADS = DaemonThreads()
"""The package's daemon threads for user code that runs in the trainer's process."""
