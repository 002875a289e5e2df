"""Calls blocked in a worker do not hold the pool's capacity: an idle worker lends its place.

A call that has run ``lend_after`` seconds while its worker's process tree used next to no CPU
(at most :data:`IDLE_SHARE` of one core: it sleeps, waits on a socket, a lock or a child that
waits too) is *lent* (:meth:`~agentfly.rollout.execution.call_queue.CallQueue.lend`): it stops
counting against ``num_workers``, so the next waiting call starts on another worker, started
for it if need be. The lent call keeps running to its own deadline and result. A lent call whose
worker computes again is reclaimed: it counts again, and nothing new starts until the running
calls are back under ``num_workers``, so the CPU is never shared by more computing calls than
the pool was sized for (give or take the calls that woke meanwhile). At most ``max_lent`` calls
are lent at once.

So a tool whose calls hang costs the chains it hits their timeout each, side by side, instead
of queueing the calls behind them. CPU time and resident memory are read from ``/proc`` (Linux):
the worker's own ``stat`` (its reaped children included) and those of its live descendants.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable

from agentfly.rollout.execution.call_queue import CallQueue
from agentfly.rollout.execution.worker_process import Worker

IDLE_SHARE = 0.1  # of one core: a process tree below it, over the interval looked at, is idle
RECHECK_S = 0.5  # a lent call's worker is looked at again after this long
_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE_MB = os.sysconf("SC_PAGE_SIZE") / 2**20


def _descendants(pid: int) -> list[int]:
    """``pid`` and its live descendants (from ``/proc/<pid>/task/*/children``)."""
    out, todo = [], [pid]
    while todo and len(out) < 1024:
        p = todo.pop()
        out.append(p)
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
            except OSError:
                continue
    return out


def tree_usage(pid: int) -> tuple[float, float] | None:
    """(CPU seconds, resident MiB) of ``pid``'s process tree; None when ``pid`` is gone."""
    cpu = rss = 0.0
    for p in _descendants(pid):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            if p == pid:
                return None
            continue
        # utime stime cutime cstime (fields 14-17 of stat), rss in pages (field 24)
        cpu += sum(int(x) for x in fields[11:15]) / _TICKS
        rss += int(fields[21]) * _PAGE_MB
    return cpu, rss


class Lender:
    """Lends and reclaims the places of the pool's busy workers (see the module docstring).

    Args:
        lend_after: seconds a call must have run idle before its place is lent.
        max_lent: calls lent at once at most (0: none).
        usage: reads a process tree's (CPU seconds, resident MiB); :func:`tree_usage`.
    """

    def __init__(self, lend_after: float, max_lent: int, usage=tree_usage) -> None:
        self.lend_after = float(lend_after)
        self.max_lent = int(max_lent)
        self.usage = usage

    def step(self, workers: Iterable[Worker], queue: CallQueue, now: float) -> bool:
        """Look at the busy workers whose look is due; whether a call was lent or reclaimed."""
        if self.max_lent <= 0:
            return False
        changed = False
        for w in workers:
            job = w.job
            if job is None:
                continue
            if w.mark is None:  # its call just started
                w.mark = self._look(w, now)
                continue
            since, cpu_then = w.mark
            if now - since < (RECHECK_S if job.lent else self.lend_after):
                continue
            look = self._look(w, now)
            if look is None:
                continue
            idle = look[1] - cpu_then <= IDLE_SHARE * (now - since)
            if job.lent and not idle:
                queue.reclaim(job)
                changed = True
            elif not job.lent and idle and queue.lent < self.max_lent:
                queue.lend(job)
                changed = True
            w.mark = look
        return changed

    def next_look(self, workers: Iterable[Worker]) -> float:
        """When :meth:`step` next has a worker to look at (``-inf``: now; ``inf``: never)."""
        if self.max_lent <= 0:
            return math.inf
        due = [
            -math.inf
            if w.mark is None
            else w.mark[0] + (RECHECK_S if w.job.lent else self.lend_after)
            for w in workers
            if w.job is not None
        ]
        return min(due, default=math.inf)

    def _look(self, w: Worker, now: float) -> tuple[float, float] | None:
        usage = self.usage(w.pid)
        if usage is None:
            return None
        w.rss_mb = usage[1]
        return now, usage[0]
