"""The tool breaker: its counting rules by hand (:class:`Breaker`), what it counts as a failure
(:class:`ToolBreakers`), and ``run_tool_call`` stopping a broken tool's calls."""

from __future__ import annotations

import asyncio
import logging

import pytest

from agentfly.rollout.tools import tool
from agentfly.rollout.tools.base import ToolUnavailableError
from agentfly.rollout.tools.breaker import Breaker, ToolBreakers, ToolBroken, failed_calls
from agentfly.rollout.tools.call import run_tool_call

T = "timeout"


def trips(breaker: Breaker, kinds: list[str | None], order: list[int] | None = None) -> list[int]:
    """The 1-based calls at whose end ``breaker`` trips: the calls of ``kinds`` start in turn,
    and end in ``order`` (their indices; by default as they started)."""
    calls = [breaker.start() for _ in kinds]
    order = list(range(len(kinds))) if order is None else order
    return [i + 1 for i in order if breaker.end(calls[i], kinds[i]) is not None]


def test_the_first_calls_rule_trips_at_the_nth_call_when_all_failed_the_same_way():
    b = Breaker(first_calls=3, window=0, failure_rate=1.0)
    assert trips(b, [T, T, T]) == [3]  # not before the third


def test_the_first_calls_rule_message_names_the_kind():
    b = Breaker(first_calls=2, window=0, failure_rate=1.0)
    one, two = b.start(), b.start()
    assert b.end(one, "worker_died") is None
    assert b.end(two, "worker_died") == "its first 2 calls all failed the same way (worker_died)"
    assert b.end(b.start(), "worker_died") is None  # tripped once


@pytest.mark.parametrize(
    "kinds",
    [
        [T, "worker_died", T],  # failed, but not the same way
        [T, None, T],  # one answer among them
        [None, T, T, T, T, T],  # the failures came after the first calls
    ],
)
def test_the_first_calls_rule_keeps_quiet_otherwise(kinds):
    assert trips(Breaker(first_calls=3, window=0, failure_rate=1.0), kinds) == []


def test_the_failure_rate_rule_counts_over_the_last_window_calls():
    """window 4, rate 0.75: 3 failures of the last 4 calls trip it, 2 do not; the window slides."""
    b = Breaker(first_calls=0, window=4, failure_rate=0.75)
    # the windows after calls 4 and 5: (F . F .) and (. F . F): 2 of 4 each
    assert trips(b, [T, None, T, None, T]) == []
    assert trips(b, [T]) == [1]  # the window after call 6: (F . F F), 3 of 4 >= 0.75
    full = Breaker(first_calls=0, window=4, failure_rate=1.0)
    assert trips(full, [None, T, T, T, T]) == [5]  # 4 of the last 4 only at the fifth call


def test_calls_count_in_the_order_they_started_not_the_order_they_ended():
    """window 4, rate 0.75, 8 calls. Hung calls end last (at their timeout): 3 of 8 failing
    (calls 2, 5, 7), the last 4 to end hold 3 failures, but no 4 consecutive calls by start do.
    Quick failures end first: 4 of 8 failing (odd calls), the first 4 to end are all failures,
    but the windows by start hold 2 each. Neither trips; the first-calls rule (3) neither."""
    hung_last = [None, T, None, None, T, None, T, None]
    order = [0, 2, 3, 5, 7, 1, 4, 6]
    assert trips(Breaker(first_calls=3, window=4, failure_rate=0.75), hung_last, order) == []
    quick_failures = [T, None] * 4
    order = [0, 2, 4, 6, 1, 3, 5, 7]
    assert trips(Breaker(first_calls=3, window=4, failure_rate=0.75), quick_failures, order) == []


def test_a_call_cancelled_counts_for_neither_rule():
    """The first of 3 calls is cancelled: the first-calls rule never has its 3 verdicts; the
    window skips it."""
    b = Breaker(first_calls=3, window=2, failure_rate=1.0)
    cancelled, *calls = (b.start() for _ in range(3))
    b.drop(cancelled)
    assert b.end(calls[0], T) is None
    assert b.end(calls[1], T) == "2 of its last 2 calls failed, at least the failure rate 1"


def test_a_rule_set_to_zero_never_trips():
    assert trips(Breaker(first_calls=0, window=0, failure_rate=0.0), [T] * 100) == []


def test_the_counts_are_kept_by_kind():
    b = Breaker(first_calls=0, window=0, failure_rate=1.0)
    for kind in [T, None, "worker_died", T]:
        b.end(b.start(), kind)
    assert b.calls == 4 and b.failed == {T: 2, "worker_died": 1}


def test_a_raise_of_the_tool_is_an_answer_and_only_infrastructure_failures_count(caplog):
    """``exception`` (the tool refused the input) and ``output_too_large`` are answers: 20 of
    them trip nothing; 2 timeouts then trip a 2-call rule only once the first calls were all
    failures, which they were not; the failure counter moves by the failures alone."""
    board = ToolBreakers(first_calls=2, window=0, failure_rate=1.0)
    before = failed_calls()
    for _ in range(20):
        board.record("calc", board.start("calc"), "exception", "Error: bad input")
        board.record("calc", board.start("calc"), "output_too_large", "Error: too much")
    board.record("calc", board.start("calc"), T, "Error: hung")
    board.record("calc", board.start("calc"), T, "Error: hung")
    assert failed_calls() - before == 2
    fresh = ToolBreakers(first_calls=2, window=0, failure_rate=1.0)
    with caplog.at_level(logging.WARNING, logger="agentfly.rollout.tools.breaker"):
        fresh.record("search", fresh.start("search"), "unavailable", "Error: 503")
        with pytest.raises(ToolBroken) as broken:
            fresh.record("search", fresh.start("search"), "unavailable", "Error: 503")
    message = str(broken.value)
    assert "tool 'search'" in message and "2 of 2 calls failed (unavailable ×2)" in message
    assert "Error: 503" in message and "first_calls=2" in message
    said = [r.getMessage() for r in caplog.records if "'search'" in r.getMessage()]
    assert said == ["tool 'search' failed (unavailable) on call 1: Error: 503"]  # once a kind
    with pytest.raises(ToolBroken):  # and every later call of it, at once
        fresh.start("search")
    fresh.start("calc")  # another tool goes on


DOWN_CALLS: list[int] = []  # the calls that reached the tool


@tool(name="test_breaker_down", runs_in="thread", timeout=5.0)
def _down(x: int) -> str:
    """Its service is down.

    Args:
        x: a number.
    """
    DOWN_CALLS.append(x)
    raise ToolUnavailableError("503 from the service")


def test_run_tool_call_stops_a_tool_whose_first_calls_all_failed():
    """3 calls of a tool whose service is down answer ``unavailable``; with them the breaker
    (first_calls=3) trips and the third raises; a fourth raises before the tool runs; a call
    whose arguments do not fit the schema never reached the tool and is not counted."""
    board = ToolBreakers(first_calls=3, window=0, failure_rate=1.0)
    DOWN_CALLS.clear()

    async def call(args) -> object:
        return await run_tool_call("test_breaker_down", args, breakers=board)

    bad = asyncio.run(call({"x": "not a number"}))
    assert bad.error == "invalid_arguments"
    first, second = asyncio.run(call({"x": 1})), asyncio.run(call({"x": 2}))
    assert first.error == second.error == "unavailable"
    with pytest.raises(ToolBroken, match="its first 3 calls all failed the same way"):
        asyncio.run(call({"x": 3}))
    with pytest.raises(ToolBroken):
        asyncio.run(call({"x": 4}))
    assert DOWN_CALLS == [1, 2, 3]  # the fourth never ran


def test_a_broken_tool_stops_the_rollout_instead_of_failing_its_chains(tiny_model_dir):
    """4 chains each call a tool whose service is down, breaker first_calls=3: the rollout
    raises the third call's ToolBroken (a chain never records it as its own error)."""
    from tests.rollout.scripted_loops import ROWS, call, make_loop

    script = [call("test_breaker_down", x=1), call("answer", answer="408")]
    loop = make_loop(
        tiny_model_dir, script, tools=("test_breaker_down", "answer"), num_chains=2,
        tool_breaker={"first_calls": 3, "window": 0, "failure_rate": 1.0},
    )  # fmt: skip
    loop.reward = None
    with pytest.raises(ToolBroken, match="tool 'test_breaker_down' keeps failing"):
        loop.run(ROWS)
