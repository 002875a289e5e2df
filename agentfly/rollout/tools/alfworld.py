"""ALFWorld's tools, AgentFly's names: ``alfworld_step``, ``alfworld_reset``,
``alfworld_get_admissible_commands``, ``alfworld_get_task_objective``.

The four act on the chain's one ``alfworld`` environment (:mod:`agentfly.envs.alfworld`, the
user's game files under ``data_dir`` or ``$ALFWORLD_DATA``), reset with the chain's row
(``task_id`` and ``split``, or ``game_file``). ``alfworld_episode_reward`` scores the episode.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

from agentfly.rollout.tools.base import ToolResult
from agentfly.rollout.tools.environment import EnvSettings, act, env_failure, env_tool


@dataclasses.dataclass(frozen=True)
class ALFWorldSettings(EnvSettings):
    """The ``alfworld`` environment's settings.

    Attributes:
        data_dir: the folder holding ``json_2.1.1`` (None: ``$ALFWORLD_DATA``, else ``~/.cache/alfworld``).
    """

    max_steps: int | None = 50
    data_dir: str | None = None

    def environment_problem(self) -> str | None:
        from agentfly.envs.alfworld import HOW_TO_GET_DATA, alfworld_data_dir
        from agentfly.envs.base import EnvUnavailable

        if importlib.util.find_spec("alfworld") is None:
            return f"the alfworld environment needs the alfworld package; {HOW_TO_GET_DATA}"
        try:
            alfworld_data_dir(self.data_dir)
        except EnvUnavailable as e:
            return str(e)
        return None


def _alfworld_tool(name: str):
    return env_tool(name=name, environment="alfworld", settings=ALFWorldSettings, max_resources=8)


@_alfworld_tool("alfworld_step")
def alfworld_step(action: str, resource) -> ToolResult:
    """Take an action in the ALFWorld household environment and return what follows.

    Args:
        action: the command, e.g. ``go to countertop 1``, ``take apple 1 from countertop 1``.
    """
    return act(resource, action)


@_alfworld_tool("alfworld_reset")
def alfworld_reset(resource) -> ToolResult:
    """Start the task again from its beginning; returns the first observation."""
    try:
        return ToolResult(observation=resource.restart())
    except Exception as e:  # the environment's fault
        return env_failure(e)


@_alfworld_tool("alfworld_get_admissible_commands")
def alfworld_get_admissible_commands(resource) -> ToolResult:
    """The commands the game accepts now, one per line."""
    return ToolResult(observation="\n".join(resource.info().get("admissible_actions", [])))


@_alfworld_tool("alfworld_get_task_objective")
def alfworld_get_task_objective(resource) -> ToolResult:
    """The task's objective and its type."""
    info = resource.reset_info()
    goal = info.get("goal") or "No task objective found"
    # the game's folder: json_2.1.1/<split>/<task type>-<object>-...-<receptacle>-<scene>/trial_.../
    folder = Path(str(info.get("game_file", ""))).parent.parent.name
    task_type = folder.split("-", 1)[0] if "-" in folder else "Unknown task type"
    return ToolResult(observation=f"Task: {goal}\nTask Type: {task_type}")
