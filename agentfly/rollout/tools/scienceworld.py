"""ScienceWorld's tool, AgentFly's name: ``scienceworld_explorer``.

It acts on the chain's ``scienceworld`` environment (:mod:`agentfly.envs.scienceworld`, a Java
program in the environment's process), reset with the chain's row (``task_name`` and
``variation``, or AgentFly's ``variation_idx``); the observation is ScienceWorld's text.
``scienceworld_reward`` scores the episode. A ScienceWorld process takes seconds to start and
~250 MB: ``tool_config.scienceworld_explorer.max_resources`` caps how many live at once.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import shutil

from agentfly.rollout.tools.base import ToolResult
from agentfly.rollout.tools.environment import EnvSettings, act, env_tool

DESCRIPTION = (
    "Take an action in scienceworld environment and return the observation. Valid actions are "
    "'look around', 'inventory', 'task', 'open <OBJ>', 'close <OBJ>', 'deactivate <OBJ>', "
    "'activate <OBJ>', 'connect <OBJ> to <OBJ2>', 'disconnect <OBJ>', 'use <OBJ>', "
    "'use <OBJ> [on <OBJ2>]' (OBJ2 is optional), 'look at <OBJ>', 'look in <OBJ>', 'read <OBJ>', "
    "'move <OBJ> to <OBJ2>', 'pick up <OBJ>', 'put down <OBJ>', 'pour <OBJ> into <OBJ2>', "
    "'dunk <OBJ> into <OBJ2>', 'mix <OBJ>', 'go to <LOC>', 'eat <OBJ>', 'flush <OBJ>', "
    "'focus on <OBJ>', 'wait [<DURATION>]' (DURATION is optional)"
)


@dataclasses.dataclass(frozen=True)
class ScienceWorldSettings(EnvSettings):
    """The ``scienceworld`` environment's settings.

    Attributes:
        simplification: ScienceWorld's simplifications (``easy``, or a comma-separated list such
            as ``teleportAction,openDoors``; empty for none, as AgentFly plays it).
    """

    max_steps: int | None = 100
    simplification: str = ""

    def environment_problem(self) -> str | None:
        if importlib.util.find_spec("scienceworld") is None:
            return "the scienceworld environment needs the scienceworld package: pip install 'agentfly[envs]'"
        if shutil.which("java") is None:
            return ("the scienceworld environment needs a Java runtime and no `java` is on PATH "
                    "(Debian: apt-get install openjdk-17-jre-headless)")
        return None


@env_tool(name="scienceworld_explorer", environment="scienceworld", settings=ScienceWorldSettings,
          description=DESCRIPTION, max_resources=48)
def scienceworld_explorer(action: str, resource) -> ToolResult:
    """Take an action in the ScienceWorld environment.

    Args:
        action: a ScienceWorld action, e.g. ``look around``, ``open door to kitchen``.
    """
    return act(resource, action)
