"""OpenEnv: an episode played through the OpenEnv client against a local OpenEnv server (the
``openenv`` package's app wrapping a TextWorld game) equals the episode played in process."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentfly.envs import EnvError, EnvUnavailable
from agentfly.envs.openenv import OpenEnvEnv
from agentfly.envs.textworld import TextWorldEnv

MCP1_OVERLAY = Path(sys.prefix) / "openenv-mcp1"
"""openenv's server imports fastmcp's client, which needs mcp 1.x where vLLM pins 2.x: the
Makefile installs mcp 1.x here, and only the server process puts it first on its path."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server_url():
    pytest.importorskip("textworld")
    pytest.importorskip("openenv", reason="needs the openenv package (pip install 'agentfly[envs]')")
    port = free_port()
    paths = [str(MCP1_OVERLAY)] if MCP1_OVERLAY.is_dir() else []
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join(paths + [os.path.abspath(p) for p in sys.path if p])}
    proc = subprocess.Popen([sys.executable, "-m", "tests.envs.openenv_textworld_server", str(port)],
                            env=environ, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.skip(f"the OpenEnv server does not start here: {proc.stderr.read()[-500:]}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.2)
        else:
            pytest.fail("the OpenEnv server did not listen within 60 s")
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait()


def episode(env, task, actions):
    observation, info = env.reset(task, seed=0)
    steps = [(r.observation, r.reward, r.terminated) for r in (env.step(a) for a in actions)]
    return observation, info.get("admissible_actions"), steps


def test_an_episode_over_openenv_equals_the_episode_in_process(server_url, textworld_game):
    local = TextWorldEnv(max_steps=None)
    _, info = local.reset(textworld_game)
    actions = ["look", "inventory", *info["walkthrough"]]
    expected = episode(local, textworld_game, actions)
    local.close()
    remote = OpenEnvEnv(server_url, action_field="command", observation_field="text", goal_field="goal",
                        actions_field="admissible_commands", timeout=30)
    try:
        got = episode(remote, {"reset_kwargs": {"game_file": textworld_game["game_file"]}}, actions)
    finally:
        remote.close()
    assert got == expected
    assert got[2][-1][2] and sum(step[1] for step in got[2]) == textworld_game["max_score"]


def test_two_sessions_play_their_own_games(server_url, textworld_game):
    task = {"reset_kwargs": {"game_file": textworld_game["game_file"]}}
    first, second = (OpenEnvEnv(server_url, action_field="command", observation_field="text") for _ in range(2))
    try:
        first.reset(task)
        second.reset(task)
        local = TextWorldEnv(max_steps=None)
        first_command = local.reset(textworld_game)[1]["walkthrough"][0]
        local.close()
        assert first.step(first_command).reward == 1.0
        assert second.step(first_command).reward == 1.0  # not affected by the first session
    finally:
        first.close()
        second.close()


def test_a_server_error_is_raised_with_its_message(server_url):
    env = OpenEnvEnv(server_url, action_field="command", observation_field="text", timeout=30)
    try:
        with pytest.raises(EnvError, match=r"openenv server .*no game file at /nonexistent.z8"):
            env.reset({"reset_kwargs": {"game_file": "/nonexistent.z8"}})
    finally:
        env.close()


def test_no_server_is_unavailable_naming_the_url():
    with pytest.raises(EnvUnavailable, match=r"cannot connect to ws://127.0.0.1:\d+/ws"):
        OpenEnvEnv(f"http://127.0.0.1:{free_port()}", timeout=5)
