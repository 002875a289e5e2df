"""The package's daemon threads: a bounded map (the code reward runs its test cases with it)."""

from __future__ import annotations

import threading
import time

import pytest

from agentfly.rollout.execution.daemon_threads import DaemonThreads


def test_map_keeps_order_and_caps_the_calls_running_at_once():
    threads = DaemonThreads("test-map")
    lock = threading.Lock()
    running, peak = [0], [0]
    first_three = threading.Barrier(3, timeout=10)  # passes only when three calls run at once

    def slow_square(x: int) -> int:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        if x < 3:
            first_three.wait()
        time.sleep(0.02)
        with lock:
            running[0] -= 1
        return x * x

    assert threads.map(slow_square, range(7), max_parallel=3) == [0, 1, 4, 9, 16, 25, 36]
    assert peak[0] == 3  # the cap is reached and never passed


def test_map_runs_every_call_then_raises_the_first_error():
    threads = DaemonThreads("test-map")
    ran: list[int] = []

    delay = {0: 0.0, 1: 0.03, 2: 0.0, 3: 0.01, 4: 0.05}  # item 3 fails before item 1

    def check(x: int) -> int:
        time.sleep(delay[x])
        ran.append(x)
        if x in (1, 3):
            raise ValueError(f"item {x}")
        return x

    with pytest.raises(ValueError, match="item 1"):
        threads.map(check, range(5), max_parallel=5)
    assert sorted(ran) == [0, 1, 2, 3, 4]
