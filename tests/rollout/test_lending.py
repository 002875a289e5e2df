"""Calls blocked in a worker do not hold the pool's capacity, within the memory budget: the
lending rule on scripted CPU readings, the memory claim by hand, and real pools whose calls
sleep side by side instead of queueing."""

from __future__ import annotations

import concurrent.futures
import os
import time
from pathlib import Path

import pytest

from agentfly.rollout.execution.call_queue import Call, CallQueue
from agentfly.rollout.execution.lending import IDLE_SHARE, Lender
from agentfly.rollout.execution.memory_budget import (
    claim_mb,
    machine_memory_mb,
    may_start,
    surplus,
)
from agentfly.rollout.execution.worker_process import Worker
from agentfly.rollout.execution.workers import WorkerPool
from tests.rollout.test_workers import _wait_started


class FakeProc:
    def __init__(self, pid: int) -> None:
        self.pid = pid


def busy_worker(queue: CallQueue, pid: int = 1) -> tuple[Worker, Call]:
    job = Call(concurrent.futures.Future(), b"", 10.0, "t", submitted=0.0, queue_deadline=60.0)
    queue.push(job)
    assert queue.pop() is job
    w = Worker(FakeProc(pid), start_deadline=0.0, state="busy", job=job)
    return w, job


def test_an_idle_call_is_lent_after_lend_after_and_reclaimed_when_it_computes():
    """lend_after 0.5 s; CPU time read from a script: the first look (t=0) marks it; at t=0.4
    nothing is due; at t=0.5 the tree used 0.01 s (under IDLE_SHARE x 0.5 s): lent, and its
    resident memory kept; at t=1.0 (0.5 s later, RECHECK_S) it used 0.3 s: reclaimed."""
    readings = {0.0: (1.0, 50.0), 0.5: (1.01, 60.0), 1.0: (1.31, 61.0)}
    now = [0.0]
    lender = Lender(0.5, max_lent=4, usage=lambda pid: readings[now[0]])
    q = CallQueue(1)
    w, job = busy_worker(q)
    for t, lent in ((0.0, False), (0.4, False), (0.5, True), (1.0, False)):
        now[0] = t if t in readings else now[0]
        lender.step([w], q, t)
        assert job.lent is lent, t
    assert w.rss_mb == 61.0
    assert 0.01 <= IDLE_SHARE * 0.5 < 0.3


def test_a_computing_call_keeps_its_place():
    """Half a core busy (0.25 s of CPU per 0.5 s looked at): never lent."""
    cpu = [0.0]
    lender = Lender(0.5, max_lent=4, usage=lambda pid: (cpu[0], 10.0))
    q = CallQueue(1)
    w, job = busy_worker(q)
    for step in range(10):
        cpu[0] = 0.25 * step
        lender.step([w], q, 0.5 * step)
        assert not job.lent


def test_no_more_than_max_lent_calls_are_lent():
    lender = Lender(0.1, max_lent=2, usage=lambda pid: (0.0, 10.0))
    q = CallQueue(8)
    workers = [busy_worker(q, pid)[0] for pid in range(5)]
    for t in (0.0, 0.2, 0.4):
        lender.step(workers, q, t)
    assert q.lent == 2


def test_the_claim_counts_a_lent_worker_at_its_resident_memory():
    """memory_mb 100: two workers that may compute (100 each) and one lent at 30 MiB claim
    230 MiB; a fourth fits a 330 MiB budget exactly, not a 329 one, unless it is one of the
    first num_workers; memory_mb 0 bounds nothing."""
    q = CallQueue(4)
    workers = [busy_worker(q, pid)[0] for pid in range(3)]
    workers[0].state, workers[0].job = "idle", None
    q.lend(workers[2].job)
    workers[2].rss_mb = 30.0
    assert claim_mb(workers, 100) == 230.0
    assert may_start(workers, 100, 330, num_workers=2)
    assert not may_start(workers, 100, 329, num_workers=2)
    assert may_start(workers, 100, 0, num_workers=4)
    assert may_start(workers, 0, 1, num_workers=1)


def test_idle_workers_beyond_the_need_or_past_the_budget_are_let_go():
    """memory_mb 100, num_workers 2; 2 workers with lent calls (30 MiB each) and 3 idle (100
    each): claim 360. Needing 4 workers, one idle one goes (claim 260); with a budget of 200,
    one more (160 <= 200); never below num_workers: with a budget of 0, 3 go, 2 stay."""
    q = CallQueue(4)
    lent = [busy_worker(q, pid)[0] for pid in range(2)]
    for w in lent:
        q.lend(w.job)
        w.rss_mb = 30.0
    idle = [Worker(FakeProc(10 + i), start_deadline=0.0, state="idle") for i in range(3)]
    workers = lent + idle
    assert claim_mb(workers, 100) == 360.0
    assert len(surplus(workers, 4, 100, 1000, num_workers=2)) == 1
    assert len(surplus(workers, 4, 100, 200, num_workers=2)) == 2
    assert len(surplus(workers, 5, 100, 0, num_workers=2)) == 3
    assert surplus(workers, 5, 100, 1000, num_workers=2) == []
    assert all(w.state == "idle" for w in surplus(workers, 0, 100, 0, num_workers=2))


def test_the_default_budget_is_the_machine_s_memory():
    total_kb = next(
        int(line.split()[1])
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemTotal:")
    )
    assert 0 < machine_memory_mb() <= total_kb // 1024
    assert WorkerPool(1).memory_budget_mb == machine_memory_mb()


# ------------------------------------------------------------------------------- real pools


# The calls below are made inside the tests, so that they reach a worker by value: by
# reference, a worker's first call would import this module (and pytest), which is not idle.


@pytest.mark.serial
def test_calls_that_sleep_wait_side_by_side_not_in_a_queue():
    """8 calls sleeping 6 s on 2 workers: queued, they would take 4 waves (24 s); each lends its
    place 0.1 s into its sleep, so all run at once and end within two waves (12 s: the places are
    lent two by two, each a few scheduling delays on a loaded machine), each on a worker of its
    own."""

    def sleeps(seconds: float) -> int:
        time.sleep(seconds)
        return os.getpid()

    with WorkerPool(2) as pool:
        _wait_started(pool, 2)
        start = time.monotonic()
        futures = [pool.submit(sleeps, (6.0,), timeout=20, label="sleeps") for _ in range(8)]
        pids = [f.result(30) for f in futures]
        elapsed = time.monotonic() - start
        assert 6.0 <= elapsed < 2 * 6.0, elapsed
        assert len(set(pids)) == 8
        assert pool._queue.lent == 0 and pool._queue.running == 0  # all given back


def _claim_now(pool: WorkerPool) -> float:
    """The pool's claim, read afresh from /proc: a lent worker at its resident MiB now."""
    total = 0.0
    for w in list(pool._workers):
        job = w.job
        if job is not None and job.lent:
            try:
                pages = int(Path(f"/proc/{w.pid}/statm").read_text().split()[1])
            except OSError:
                continue
            total += pages * os.sysconf("SC_PAGE_SIZE") / 2**20
        else:
            total += pool.memory_mb
    return total


@pytest.mark.serial
def test_the_workers_claim_stays_within_the_memory_budget():
    """8 calls each holding 96 MiB idle for 6 s on 2 workers of memory_mb 256, a budget of
    640 MiB: the claim (256 per worker that may compute, a lent one at its resident memory,
    about 110 MiB) never passes the budget (16 MiB of slack for resident memory that moves;
    looked at while no worker is idle: one beyond the calls is let go at the manager's next
    step). By hand: 2 workers lent (220) leave room for one more (476), whose call lent (330)
    for a fourth (586), and then none (696 > 640): 4 at once, not 8, though more than the 2 of
    num_workers; every call still ends, later. With the machine's memory as the budget, all 8
    run at once. (lend_after 0.5 s: a call is lent once its 96 MiB are resident, on a loaded
    machine too.)"""
    budget = 640

    def holds(mib: int, seconds: float) -> int:
        block = b"x" * (mib * 2**20)
        time.sleep(seconds)
        return len(block)

    def run(pool: WorkerPool) -> int:
        futures = [pool.submit(holds, (96, 6.0), timeout=30, label="holds") for _ in range(8)]
        peak, deadline = 0, time.monotonic() + 60
        while not all(f.done() for f in futures):
            assert time.monotonic() < deadline
            with pool._lock:
                peak = max(peak, len(pool._workers))
                settled = all(w.state != "idle" for w in pool._workers)
                if pool.memory_budget_mb == budget and settled:
                    assert _claim_now(pool) <= budget + 16
            time.sleep(0.05)
        assert [f.result() for f in futures] == [96 * 2**20] * 8
        return peak

    with WorkerPool(2, memory_mb=256, memory_budget_mb=budget, lend_after=0.5) as pool:
        bounded = run(pool)
    with WorkerPool(2, memory_mb=256, lend_after=0.5) as pool:
        unbounded = run(pool)
    assert 2 < bounded < 8 <= unbounded, (bounded, unbounded)
