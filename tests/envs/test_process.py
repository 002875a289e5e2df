"""ProcessEnv: an environment in its own process, under deadlines. Each failure (a hang, a crash,
an exception in reset or step) is a typed error within its deadline, and no process of the
environment (its own, or a child standing for a Java or engine process) outlives it."""

from __future__ import annotations

import functools
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from agentfly.envs import (
    EnvClosed,
    EnvCrashed,
    EnvRaised,
    EnvTimeout,
    EnvUnavailable,
    EnvUsageError,
)
from agentfly.envs.process import ProcessEnv
from tests.envs.conftest import alive, wait_gone
from tests.envs.fault_envs import CountingEnv


@pytest.fixture
def env():
    process_env = ProcessEnv(CountingEnv, step_timeout=1.5, reset_timeout=10)
    yield process_env
    process_env.close()


def test_steps_run_in_another_process_and_close_ends_it_and_its_children(env):
    _, info = env.reset()
    result = env.step("go")
    assert (result.observation, result.reward) == ("step 1", 1.0)
    assert result.info["pid"] == env.pid != __import__("os").getpid()
    env.close()
    assert wait_gone(env.pid, info["child_pid"])
    env.close()  # idempotent
    with pytest.raises(EnvClosed):
        env.step("go")


def test_a_step_that_hangs_times_out_and_its_processes_are_killed(env):
    _, info = env.reset()
    start = time.monotonic()
    with pytest.raises(EnvTimeout, match=r"step\(\) did not return within 1.5 s"):
        env.step("hang")
    assert time.monotonic() - start < 1.5 + 3.0
    assert wait_gone(env.pid, info["child_pid"])
    with pytest.raises(EnvClosed):
        env.step("go")


def test_a_process_that_dies_is_a_crash_naming_the_signal(env):
    _, info = env.reset()
    with pytest.raises(EnvCrashed, match="SIGKILL"):
        env.step("crash")
    assert wait_gone(env.pid, info["child_pid"])


def test_a_failing_reset_is_a_typed_error_and_the_process_is_killed(env):
    _, info = env.reset()
    with pytest.raises(EnvRaised, match=r"reset.*KeyError.*no such level") as caught:
        env.reset({"fail": True})
    assert caught.value.type_name == "KeyError" and "Traceback" in caught.value.traceback
    assert wait_gone(env.pid, info["child_pid"])


def test_an_exception_in_step_is_raised_typed(env):
    env.reset()
    with pytest.raises(EnvRaised, match="ValueError: the simulator broke"):
        env.step("raise")


def test_a_usage_error_leaves_the_environment_running(env):
    with pytest.raises(EnvUsageError, match="before reset"):
        env.step("go")
    env.reset()
    with pytest.raises(EnvUsageError, match="not an action here"):
        env.step("usage")
    assert env.step("go").observation == "step 1"


def test_a_factory_that_cannot_start_raises_its_own_error():
    def unavailable():
        raise EnvUnavailable("no simulator here; install it")

    with pytest.raises(EnvUnavailable, match="no simulator here"):
        ProcessEnv(unavailable, start_timeout=30)


def test_named_makes_a_registered_environment():
    with ProcessEnv.named("reasoning_gym", start_timeout=60) as env:
        observation, _ = env.reset({"question": "What is 2 + 2?", "answer": "4", "dataset": "basic_arithmetic",
                                    "metadata": {"source_dataset": "basic_arithmetic"}})
        assert observation == "What is 2 + 2?"
        assert env.step("4").reward == 1.0


def test_the_environment_dies_with_the_process_that_started_it(tmp_path):
    owner = textwrap.dedent("""
        import sys, time
        from agentfly.envs.process import ProcessEnv
        from tests.envs.fault_envs import CountingEnv
        env = ProcessEnv(CountingEnv)
        _, info = env.reset()
        print(env.pid, info["child_pid"], flush=True)
        time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", owner], stdout=subprocess.PIPE, text=True,
                            env={**__import__("os").environ, "PYTHONPATH": ":".join(sys.path)})
    try:
        env_pid, child_pid = map(int, proc.stdout.readline().split())
        assert alive(env_pid) and alive(child_pid)
        proc.kill()
        proc.wait()
        assert wait_gone(env_pid, child_pid, within=10.0), "the env process outlived its owner"
    finally:
        proc.kill()


def test_steps_of_different_environments_overlap():
    envs = [ProcessEnv(CountingEnv) for _ in range(4)]
    try:
        for e in envs:
            e.reset()
        start = time.monotonic()
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda e: e.step("nap"), envs))
        assert time.monotonic() - start < 2.5  # four 1-second steps at once, not one after another
    finally:
        for e in envs:
            e.close()


def test_calls_take_public_methods_only(env):
    with pytest.raises(EnvUsageError, match="not a public method"):
        env.call("_step", "go")


def test_factory_partial_keeps_its_arguments():
    factory = functools.partial(CountingEnv)
    with ProcessEnv(factory) as env:
        env.reset()
        assert env.step("go").observation == "step 1"
