"""The call queue's bound with lent calls: a lent call frees its place and keeps its group's
share; reclaimed, it counts again."""

from __future__ import annotations

import concurrent.futures

from agentfly.rollout.execution.call_queue import Call, CallQueue


def call(label: str, at: float) -> Call:
    return Call(concurrent.futures.Future(), b"", 1.0, label, submitted=at, queue_deadline=at + 60)


def test_a_lent_call_frees_its_place_and_a_reclaimed_one_takes_it_back():
    """num_workers 1, three calls of one tool: one runs; lent, the next may start (2 running,
    1 holding the bound); reclaimed, both count and nothing more starts until one ends."""
    q = CallQueue(1)
    a, b, c = call("t", 0.0), call("t", 1.0), call("t", 2.0)
    for x in (a, b, c):
        q.push(x)
    assert q.pop() is a and q.pop() is None and q.startable() == 0
    q.lend(a)
    assert (q.running, q.lent) == (0, 1) and q.startable() == 1
    assert q.pop() is b and q.pop() is None
    q.reclaim(a)
    assert (q.running, q.lent) == (2, 0) and q.startable() == 0
    q.finished(b)
    assert q.pop() is None  # a alone still holds the one place
    q.finished(a)
    assert q.pop() is c


def test_a_lent_call_that_ends_gives_back_its_lent_count():
    q = CallQueue(2)
    a = call("t", 0.0)
    q.push(a)
    q.pop()
    q.lend(a)
    q.lend(a)  # twice is once
    assert q.lent == 1
    q.finished(a)
    assert (q.running, q.lent) == (0, 0)


def test_lent_calls_still_count_for_their_group_s_share():
    """Two tools, num_workers 1: tool h has a lent call running, tool g none; the free place goes
    to g's waiting call though h's waited longer (fewest running first, lent ones included)."""
    q = CallQueue(1)
    h1, h2, g1 = call("h", 0.0), call("h", 1.0), call("g", 2.0)
    q.push(h1)
    assert q.pop() is h1
    q.lend(h1)
    q.push(h2)
    q.push(g1)
    assert q.pop() is g1
