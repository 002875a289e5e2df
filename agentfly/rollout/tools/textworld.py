"""TextWorld's tool: ``textworld_step`` (AgentFly has none; named as ALFWorld's ``alfworld_step``).

It acts on the chain's ``textworld`` environment (:mod:`agentfly.envs.textworld`), which plays
the game file of the chain's row (``game_file``); the observation is the game's text.
``textworld_reward`` scores the episode.
"""

from __future__ import annotations

import dataclasses
import importlib.util

from agentfly.rollout.tools.base import ToolResult
from agentfly.rollout.tools.environment import EnvSettings, act, env_tool


@dataclasses.dataclass(frozen=True)
class TextWorldSettings(EnvSettings):
    """The ``textworld`` environment's settings (its deadlines and ``max_steps``)."""

    max_steps: int | None = 100

    def environment_problem(self) -> str | None:
        if importlib.util.find_spec("textworld") is None:
            return "the textworld environment needs the textworld package: pip install 'agentfly[envs]'"
        return None


@env_tool(name="textworld_step", environment="textworld", settings=TextWorldSettings, max_resources=64)
def textworld_step(action: str, resource) -> ToolResult:
    """Take an action in the text adventure game (a command such as 'open chest', 'go east',
    'take key from table') and return what the game says.

    Args:
        action: the command to play.
    """
    return act(resource, action)
