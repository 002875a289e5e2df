"""The calls a :class:`~agentfly.rollout.execution.workers.WorkerPool` holds, and which runs next.

A call has two bounds: ``queue_timeout``, the seconds it may wait for a worker, counted from its
submission, and its own ``timeout``, the seconds it may run, counted from the moment a worker
takes it. Waiting behind other calls never eats into the second: a call that hangs costs its own
caller a timeout, never the calls queued behind it.

Calls are grouped by their label (``tool 'search'``, ``reward 'f1'``): one group per tool and
per reward. The next free worker goes to the group with the fewest calls running (ties: the
group whose oldest call has waited longest); within a group, first come first served. At most
``num_workers`` calls run at once, except that a group with no call running may start one
beyond that (``num_workers`` such extra calls at most): a tool whose calls all hang holds the
workers it took until their deadlines, but cannot keep another tool or the reward from running.

A running call may be *lent* (:meth:`CallQueue.lend`): its worker is idle on the CPU (the call
waits on a sleep, a socket, a lock), so it stops counting against ``num_workers`` and another
call may start beside it; it still counts for its group's share. A lent call that computes
again is reclaimed (:meth:`CallQueue.reclaim`) and counts again (the queue then starts nothing
until the running calls are back under the bound).
"""

from __future__ import annotations

import collections
import concurrent.futures
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


@dataclass
class Call:
    """One call to run in a worker.

    Attributes:
        future: settled with its result or exception.
        frame: the request, framed for the worker's pipe.
        timeout: seconds it may run once a worker has taken it.
        label: what it calls (``tool 'search'``): its group in the queue, and its name in errors.
        submitted: ``time.monotonic()`` at submission.
        queue_deadline: a worker must have taken it by then.
        deadline: set when a worker takes it (that time + ``timeout``); infinite until then.
        lent: its worker lent its place (:meth:`CallQueue.lend`).
    """

    future: concurrent.futures.Future[Any]
    frame: bytes
    timeout: float
    label: str
    submitted: float
    queue_deadline: float
    deadline: float = math.inf
    lent: bool = False


class CallQueue:
    """Waiting calls by group, and the running calls' count by group (see the module docstring).

    Every call of one queue waits under the same ``queue_timeout``, so a group's oldest call
    is also the first to reach its queue deadline.
    """

    def __init__(self, num_workers: int) -> None:
        self.num_workers = num_workers
        self._waiting: dict[str, collections.deque[Call]] = {}
        self._running: collections.Counter[str] = collections.Counter()  # lent calls included
        self._lent = 0

    def __len__(self) -> int:
        return sum(map(len, self._waiting.values()))

    def __iter__(self) -> Iterator[Call]:
        for calls in self._waiting.values():
            yield from calls

    @property
    def running(self) -> int:
        """Calls taken by a worker, not finished and not lent: those the bound counts."""
        return self._running.total() - self._lent

    @property
    def lent(self) -> int:
        """Running calls that lent their place (:meth:`lend`)."""
        return self._lent

    def lend(self, call: Call) -> None:
        """``call``, running, waits idle: it no longer counts against ``num_workers``."""
        if not call.lent:
            call.lent = True
            self._lent += 1

    def reclaim(self, call: Call) -> None:
        """``call``, lent, computes again: it counts against ``num_workers`` again."""
        if call.lent:
            call.lent = False
            self._lent -= 1

    def push(self, call: Call) -> None:
        self._waiting.setdefault(call.label, collections.deque()).append(call)

    def expired(self, now: float) -> list[Call]:
        """Remove and return the calls whose queue deadline has come."""
        out = []
        for label, calls in list(self._waiting.items()):
            while calls and calls[0].queue_deadline <= now:
                out.append(calls.popleft())
            if not calls:
                del self._waiting[label]
        return out

    def next_deadline(self) -> float:
        """The earliest queue deadline of a waiting call (infinite when none waits)."""
        return min((calls[0].queue_deadline for calls in self._waiting.values()), default=math.inf)

    def _may_start(self, label: str) -> bool:
        running = self.running
        if running < self.num_workers:
            return True
        return self._running[label] == 0 and running < 2 * self.num_workers

    def pop(self) -> Call | None:
        """The next call to start (now counted as running), or None: none may start now."""
        ready = [label for label in self._waiting if self._may_start(label)]
        if not ready:
            return None
        label = min(ready, key=lambda g: (self._running[g], self._waiting[g][0].submitted))
        calls = self._waiting[label]
        call = calls.popleft()
        if not calls:
            del self._waiting[label]
        self._running[label] += 1
        return call

    def finished(self, call: Call) -> None:
        """``call``, taken by :meth:`pop`, no longer runs (it ended, or was cancelled)."""
        self.reclaim(call)
        self._running[call.label] -= 1
        if self._running[call.label] <= 0:
            del self._running[call.label]

    def startable(self) -> int:
        """How many waiting calls :meth:`pop` would hand out now, given enough workers."""
        waiting = len(self)
        free = max(0, self.num_workers - self.running)
        idle_groups = sum(1 for label in self._waiting if self._running[label] == 0)
        if idle_groups <= free:  # the groups with none running fit in the ordinary places
            return min(waiting, free)
        beyond = 2 * self.num_workers - max(self.running, self.num_workers)
        return free + min(idle_groups - free, beyond)

    def drain(self) -> list[Call]:
        """Remove and return every waiting call."""
        out = list(self)
        self._waiting.clear()
        return out
