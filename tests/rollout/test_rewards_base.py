"""The reward registry, argument binding and the safe call (failures score 0, never raise)."""

from __future__ import annotations

import asyncio
import logging
import math
import time

import pytest

from agentfly.core.registry import UnknownNameError
from agentfly.core.trajectory import Trajectory
from agentfly.rollout.failures import describe_policy
from agentfly.rollout.rewards import (
    REWARDS,
    RewardError,
    RewardResult,
    acompute_reward,
    bind_reward_kwargs,
    compute_reward,
    get_reward,
    reward,
    score_trajectory,
)
from agentfly.rollout.rewards import registry as reward_registry


@pytest.fixture
def scratch_registry(monkeypatch: pytest.MonkeyPatch):
    """Rewards registered in a test disappear afterwards."""
    monkeypatch.setattr(REWARDS, "_items", dict(REWARDS._items))
    monkeypatch.setattr(REWARDS, "_aliases", dict(REWARDS._aliases))
    monkeypatch.setattr(reward_registry, "_INFOS", dict(reward_registry._INFOS))
    return REWARDS


def test_builtins_are_registered():
    for name in (
        "math_equal_reward",
        "math_equal_reward_tool",
        "math_reward_string_equal",
        "math_reward_format",
        "qa_f1_reward",
        "qa_em_reward",
        "code_reward",
    ):
        assert callable(get_reward(name))


def test_registry_refuses_duplicate_name(scratch_registry):
    @reward(name="dup_reward")
    def first(prediction: str) -> float:
        return 1.0

    with pytest.raises(ValueError, match="dup_reward"):

        @reward(name="dup_reward")
        def second(prediction: str) -> float:
            return 0.0

    assert get_reward("dup_reward") is first
    reward(name="dup_reward")(first)  # the same object again is fine (module imported twice)


def test_unknown_name_lists_known_ones():
    with pytest.raises(UnknownNameError) as info:
        get_reward("math_equal_rewrd")
    message = str(info.value)
    assert "did you mean 'math_equal_reward'" in message
    assert "qa_f1_reward" in message and "code_reward" in message
    with pytest.raises(UnknownNameError):  # a config typo is not silently scored 0
        compute_reward("no_such_reward", "x")


def test_alias_resolves(scratch_registry):
    @reward(name="aliased_reward", aliases=("aliased_reward_v0",))
    def aliased(prediction: str) -> float:
        return 0.5

    assert compute_reward("aliased_reward_v0", "p").reward == 0.5


def test_custom_reward_receives_row_fields(scratch_registry):
    seen = {}

    @reward(name="custom_fields_reward", runs_in="thread")  # in this process: `seen` is ours
    def custom(prediction: str, trajectory: Trajectory, answer: str, difficulty: int) -> dict:
        seen.update(prediction=prediction, trajectory=trajectory, difficulty=difficulty)
        return {"reward": float(prediction == answer), "difficulty": difficulty, "note": "text"}

    traj = Trajectory(prompt_ids=[1, 2])
    row = {"answer": "42", "difficulty": 3, "unused": object()}  # unused is not passed
    result = compute_reward("custom_fields_reward", "42", traj, row)
    assert result == RewardResult(reward=1.0, extras={"difficulty": 3.0})  # non-numeric dropped
    assert seen == {"prediction": "42", "trajectory": traj, "difficulty": 3}


def test_kwargs_reward_receives_every_field():
    def everything(**kwargs) -> float:
        assert set(kwargs) == {"prediction", "trajectory", "answer", "id"}
        return 1.0

    result = compute_reward(everything, "p", None, {"answer": "a", "id": 7})
    assert not result.failed and result.reward == 1.0


def test_agentfly_final_response_spelling():
    def old_style(final_response: str, answer: str) -> float:
        return float(final_response == answer)

    assert compute_reward(old_style, "7", row={"answer": "7"}).reward == 1.0


def test_missing_row_field_names_field_and_reward(scratch_registry):
    @reward(name="needs_gold_reward")
    def needs_gold(prediction: str, gold: str) -> float:
        return 1.0

    result = compute_reward("needs_gold_reward", "p", row={"answer": "x"})
    assert result.failed and result.reward == 0.0
    assert "missing_field" in result.error
    assert "'gold'" in result.error and "'needs_gold_reward'" in result.error


def test_raising_reward_scores_zero_and_fails(caplog: pytest.LogCaptureFixture):
    def broken(prediction: str) -> float:
        raise ZeroDivisionError("boom")

    with caplog.at_level(logging.WARNING):
        first = compute_reward(broken, "p")
        second = compute_reward(broken, "p")
    assert first == second
    assert first.reward == 0.0 and first.failed
    assert first.error.startswith("exception: ZeroDivisionError: boom")
    # logged once per kind of failure, not once per call
    assert sum("broken" in r.getMessage() for r in caplog.records) == 1


@pytest.mark.parametrize(
    ("policy", "fate"),
    [
        ("resample", "a training chain is rolled out again (algorithm.failed_chains=resample, up to 2"),
        ("drop", "a training chain's group is dropped from the batch (algorithm.failed_chains=drop)"),
        ("keep", "a training chain is trained on with reward 0 (algorithm.failed_chains=keep)"),
    ],
)
def test_a_failed_reward_s_warning_says_what_becomes_of_the_chain(policy, fate, caplog):
    """Not "scoring 0": the chain is failed, and the policy in force decides its fate."""

    def unscored(prediction: str) -> float:
        return math.nan

    with caplog.at_level(logging.WARNING):
        result = compute_reward(unscored, "p", consequence=describe_policy(policy, 2))
    assert result.failed and result.kind == "malformed"
    (message,) = [r.getMessage() for r in caplog.records if "unscored" in r.getMessage()]
    assert "the chain gets no score" in message and "scoring 0" not in message
    assert fate in message and "a validation chain counts as reward 0" in message


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        (math.nan, "non-finite"),
        (math.inf, "non-finite"),
        ("1.0", "not a number"),
        (None, "not a number"),
        ({"acc": 1.0}, "without 'reward'"),
        ({"reward": math.nan}, "non-finite"),
        ([1.0], "not a number"),
    ],
)
def test_malformed_return_fails(value, fragment):
    result = compute_reward(lambda prediction: value, "p")
    assert result.failed and result.reward == 0.0
    assert result.error.startswith("malformed") and fragment in result.error


def test_well_formed_returns():
    assert compute_reward(lambda prediction: 1, "p") == RewardResult(1.0)
    assert compute_reward(lambda prediction: True, "p") == RewardResult(1.0)
    out = compute_reward(lambda prediction: {"reward": 0.25, "acc": False, "bad": math.nan}, "p")
    assert out == RewardResult(0.25, {"acc": 0.0})
    assert out.metrics() == {"reward": 0.25, "acc": 0.0}


def test_hung_reward_times_out_quickly():
    def sleepy(prediction: str) -> float:
        time.sleep(20)
        return 1.0

    start = time.monotonic()
    result = compute_reward(sleepy, "p", timeout=0.2)
    elapsed = time.monotonic() - start
    assert result.failed and result.reward == 0.0 and result.error.startswith("timeout")
    assert elapsed < 0.2 + 0.5


def test_thread_reward_workers_are_reused_and_a_hung_one_is_replaced(scratch_registry):
    """Rewards declared ``runs_in="thread"`` run on reusable daemon threads: 40 calls start at
    most one new thread, and while a hung reward occupies a thread the next call still returns
    at once (a new thread starts)."""
    import threading

    def thread_reward(fn):
        return reward(name=f"thread_{id(fn)}", runs_in="thread")(fn)

    compute_reward(thread_reward(lambda prediction: 1.0), "p")  # at least one idle thread now
    before = threading.active_count()
    same = thread_reward(lambda prediction: float(prediction == "p"))
    results = [compute_reward(same, "p") for _ in range(40)]
    assert [r.reward for r in results] == [1.0] * 40
    assert threading.active_count() <= before + 1
    release = threading.Event()

    @reward(name="hung_thread_reward", runs_in="thread")
    def hung(prediction: str) -> float:
        release.wait(10)
        return 1.0

    assert compute_reward(hung, "p", timeout=0.1).error.startswith("timeout")
    start = time.monotonic()
    assert compute_reward(thread_reward(lambda prediction: 0.5), "p", timeout=2).reward == 0.5
    assert time.monotonic() - start < 1.0
    release.set()


def test_a_reward_that_cannot_be_pickled_says_how_to_run_it():
    import threading

    lock = threading.Lock()

    def holds_a_lock(prediction: str) -> float:
        with lock:
            return 1.0

    result = compute_reward(holds_a_lock, "p")
    assert result.failed and result.kind == "exception"
    assert "holds_a_lock" in result.error and "runs_in='thread'" in result.error


def test_registered_timeout_is_used(scratch_registry):
    @reward(name="slow_registered_reward", timeout=0.2)
    def slow(prediction: str) -> float:
        time.sleep(3)
        return 1.0

    start = time.monotonic()
    assert compute_reward("slow_registered_reward", "p").error.startswith("timeout")
    assert time.monotonic() - start < 0.7


def test_async_variant_matches_and_times_out():
    def sleepy(prediction: str) -> float:
        time.sleep(20)
        return 1.0

    async def async_reward(prediction: str, answer: str) -> float:
        await asyncio.sleep(0)
        return float(prediction == answer)

    async def never(prediction: str) -> float:
        await asyncio.sleep(30)
        return 1.0

    async def main():
        start = time.monotonic()
        results = await asyncio.gather(
            acompute_reward("qa_em_reward", "The Cat", row={"answer": "cat"}),
            acompute_reward(sleepy, "p", timeout=0.2),
            acompute_reward(async_reward, "a", row={"answer": "a"}),
            acompute_reward(never, "p", timeout=0.2),
            acompute_reward(lambda prediction: math.nan, "p"),
        )
        return results, time.monotonic() - start

    (em, hung, coro, never_result, nan), elapsed = asyncio.run(main())
    assert em.reward == 1.0 and not em.failed
    assert hung.failed and hung.error.startswith("timeout")
    assert coro == RewardResult(1.0)
    assert never_result.failed and never_result.error.startswith("timeout")
    assert nan.failed and nan.error.startswith("malformed")
    # the hung ones were cut at their deadlines (0.2 s of running, after a worker process's start
    # for the sync one), concurrently, and did not hold up the loop
    assert elapsed < 10


def test_async_reward_in_sync_call():
    async def async_reward(prediction: str) -> float:
        return 0.5

    assert compute_reward(async_reward, "p") == RewardResult(0.5)


def test_score_trajectory_records_result():
    traj = Trajectory(prompt_ids=[1], final_response="a cat", row={"answers": ["cat", "dog"]})
    result = score_trajectory("qa_em_reward", traj)
    assert traj.reward == result.reward == 1.0
    assert traj.reward_extras == {"em": 1.0, "f1": 1.0} and not traj.reward_failed

    failing = Trajectory(prompt_ids=[1], final_response="x", row={})
    score_trajectory("qa_em_reward", failing)
    assert failing.reward == 0.0 and failing.reward_failed and "answer" in failing.error


def test_bare_decorator_uses_function_name(scratch_registry):
    @reward
    def bare_named_reward(prediction: str) -> float:
        return 0.75

    assert get_reward("bare_named_reward") is bare_named_reward
    assert bare_named_reward.reward_info.name == "bare_named_reward"
    assert compute_reward("bare_named_reward", "p").reward == 0.75


def test_bound_method_reward_keeps_its_timeout(scratch_registry):
    class Judge:
        def score(self, prediction: str) -> float:
            time.sleep(3)
            return 1.0

    reward(name="bound_method_reward", timeout=0.2)(Judge().score)  # refuses attributes
    start = time.monotonic()
    assert compute_reward("bound_method_reward", "p").error.startswith("timeout")
    assert time.monotonic() - start < 0.7


def test_bind_reward_kwargs_fails_fast_on_a_row():
    with pytest.raises(RewardError, match="requires field 'answer'"):
        bind_reward_kwargs(get_reward("math_equal_reward"), "", None, {"question": "q"})


def test_reward_decorator_rejects_bad_timeout():
    with pytest.raises(ValueError, match="positive"):
        reward(name="zero_timeout_reward", timeout=0)
