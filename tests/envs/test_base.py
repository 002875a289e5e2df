"""The Env interface: episode bookkeeping, the registry, and the layer rule (envs import only core)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from agentfly.core.registry import UnknownNameError
from agentfly.envs import Env, EnvUsageError, StepResult, get_env
from agentfly.envs.base import ENVS

ENVS_DIR = Path(__file__).resolve().parents[2] / "agentfly" / "envs"


class Walk(Env):
    """Reaches its goal at step 3."""

    def _reset(self, task, seed):
        return "at 0", {"goal": "reach 3"}

    def _step(self, action):
        position = self.steps + 1
        return StepResult(f"at {position}", float(position == 3), terminated=position == 3)


def test_an_episode_ends_at_its_goal_and_then_refuses_steps():
    env = Walk()
    with pytest.raises(EnvUsageError, match="before reset"):
        env.step("go")
    env.reset()
    rewards = [env.step("go").reward for _ in range(3)]
    assert rewards == [0.0, 0.0, 1.0]
    with pytest.raises(EnvUsageError, match="episode is over"):
        env.step("go")
    env.reset()  # a new episode
    assert env.step("go").observation == "at 1"


def test_max_steps_truncates_an_episode_that_has_not_ended():
    env = Walk(max_steps=2)
    env.reset()
    first, second = env.step("go"), env.step("go")
    assert (first.truncated, second.truncated, second.terminated) == (False, True, False)
    env = Walk(max_steps=3)
    env.reset()
    last = [env.step("go") for _ in range(3)][-1]
    assert last.terminated and not last.truncated  # ended by its goal, not cut


def test_actions_are_text():
    env = Walk()
    env.reset()
    with pytest.raises(EnvUsageError, match="an action is text"):
        env.step(3)


def test_every_shipped_environment_is_registered_and_unknown_names_list_them():
    for name in ("textworld", "scienceworld", "webshop", "alfworld", "chess_puzzle", "openenv", "reasoning_gym"):
        assert issubclass(get_env(name), Env) and get_env(name).name == name
    with pytest.raises(UnknownNameError, match="did you mean 'webshop'"):
        get_env("webshp")


def test_a_module_attr_spec_names_a_user_environment():
    assert get_env("tests.envs.test_base:Walk") is Walk
    assert "tests.envs.test_base:Walk" in ENVS


def test_environment_files_import_only_agentfly_core():
    for path in ENVS_DIR.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                if name.startswith("agentfly"):
                    assert name.startswith(("agentfly.core", "agentfly.envs")), f"{path.name} imports {name}"


def test_the_package_imports_without_any_simulator():
    code = ("import sys, agentfly.envs; from agentfly.envs import get_env; get_env('webshop');"
            "heavy = [m for m in ('textworld', 'scienceworld', 'chess', 'reasoning_gym', 'bm25s', 'torch', 'websockets')"
            " if m in sys.modules]; print(heavy); sys.exit(1 if heavy else 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
