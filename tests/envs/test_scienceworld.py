"""ScienceWorld (Java): the gold path of a task scores 1.0 in all; a wrong path less; the
variation splits are disjoint; the Java process dies with its environment; a Java process killed
mid-episode is the environment crashing (``env_crashed``), not raising."""

from __future__ import annotations

import psutil
import pytest

from agentfly.envs import EnvUsageError
from agentfly.envs.process import ProcessEnv
from agentfly.rollout.tools.environment import act
from tests.envs.conftest import requires_java, wait_gone

pytestmark = requires_java
# With the "easy" simplifications: a 10-step gold path whose first step raises the score while
# ScienceWorld's own reward for it is 0
TASK = {"task_name": "find-living-thing", "variation": 0}


@pytest.fixture(scope="module")
def science_env():
    pytest.importorskip("scienceworld", reason="needs the scienceworld package (pip install 'agentfly[envs]')")
    env = ProcessEnv.named("scienceworld", {"simplification": "easy", "max_steps": 30}, start_timeout=120, step_timeout=60)
    yield env
    env.close()


def java_children(pid: int) -> list[int]:
    return [p.pid for p in psutil.Process(pid).children(recursive=True) if "java" in p.name()]


def test_the_gold_path_completes_the_task_with_reward_one(science_env):
    _, info = science_env.reset(TASK)
    assert "Your task is to" in info["goal"] and info["walkthrough"]
    results = []
    for action in info["walkthrough"]:  # the gold path may go on past the task's completion
        results.append(science_env.step(action))
        if results[-1].done:
            break
    assert sum(r.reward for r in results) == pytest.approx(1.0)
    assert results[-1].terminated and results[-1].info["won"]


def test_a_wrong_path_scores_less(science_env):
    science_env.reset(TASK)
    results = [science_env.step(a) for a in ["look around", "inventory", "look around"]]
    assert sum(r.reward for r in results) < 1.0
    assert not any(r.terminated for r in results)


def test_variation_splits_are_disjoint(science_env):
    splits = {s: set(science_env.call("variations", TASK["task_name"], s)) for s in ("train", "dev", "test")}
    assert all(splits.values())
    assert not (splits["train"] & splits["dev"] or splits["train"] & splits["test"] or splits["dev"] & splits["test"])


def test_an_unknown_task_is_a_usage_error_naming_the_known_ones(science_env):
    with pytest.raises(EnvUsageError, match=r"unknown task 'boiling'.*boil"):
        science_env.reset({"task_name": "boiling", "variation": 0})


def test_the_java_process_dies_with_its_environment():
    pytest.importorskip("scienceworld")
    env = ProcessEnv.named("scienceworld", start_timeout=120)
    java = java_children(env.pid)
    assert java, "ScienceWorld runs a Java process"
    env.close()
    assert wait_gone(*java)


@pytest.mark.slow
def test_a_java_process_killed_mid_episode_is_the_environment_crashing():
    """The step after the kill loses py4j's socket: the chain's tool call fails as
    ``env_crashed`` (the kind :mod:`agentfly.rollout.failures` counts), naming the signal."""
    pytest.importorskip("scienceworld")
    env = ProcessEnv.named("scienceworld", {"simplification": "easy"}, start_timeout=120, step_timeout=60)
    try:
        env.reset(TASK)
        env.step("look around")  # the episode runs
        (java,) = java_children(env.pid)
        psutil.Process(java).kill()
        assert wait_gone(java)
        result = act(env, "look around")
        assert not result.ok and result.error == "env_crashed", result
        assert "Java process was killed by signal SIGKILL during step()" in result.observation
    finally:
        env.close()
