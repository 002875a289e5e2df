"""A run's tools: the names in ``agent.init_config.tools``, each bound to its ``tool_config``
settings (:func:`~agentfly.rollout.tools.settings.configure_tool`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentfly.rollout.tools.base import Tool, get_tool
from agentfly.rollout.tools.settings import ToolSettingsError, configure_tool


class ToolConfigError(ToolSettingsError):
    """Problems with a run's tools and their settings, each naming its config key.

    Attributes:
        problems: one message per problem.
    """

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


def bind_tools(names: Sequence[str], tool_config: Mapping[str, Any] | None = None) -> list[Tool]:
    """The tools ``agent.init_config.tools`` names, each configured with its ``tool_config`` entry.

    ``tool_config`` is keyed by a tool's name or alias (``google_search`` configures ``search``);
    a key naming no tool of the run is refused rather than ignored.

    Args:
        names: registered tool names, aliases or ``module:attr`` specs, in order.
        tool_config: tool name → {setting: value}.

    Returns:
        Configured copies of the tools (the registered ones are left unchanged).

    Raises:
        ToolConfigError: every unknown tool, unused or doubled ``tool_config`` entry, unknown or
            wrongly typed setting and refused value, each naming its config key.
    """
    problems: list[str] = []
    tools: list[Tool] = []
    for name in names:
        try:
            tools.append(get_tool(name))
        except (KeyError, ValueError) as e:  # UnknownNameError, PluginError, a refused tool
            problems.append(f"agent.init_config.tools: {e}")
    used = {t.name for t in tools}
    settings: dict[str, Mapping[str, Any]] = {}
    for key, values in (tool_config or {}).items():
        where = f"agent.init_config.tool_config.{key}"
        try:
            tool = get_tool(key)
        except (KeyError, ValueError) as e:
            problems.append(f"{where}: {e}")
            continue
        if not isinstance(values, Mapping):
            problems.append(f"{where} must map setting names to values, got {values!r}")
        elif tool.name not in used:
            problems.append(
                f"{where}: tool {tool.name!r} is not in agent.init_config.tools "
                f"({', '.join(sorted(used)) or 'none'}); add it there or drop these settings"
            )
        elif tool.name in settings:
            problems.append(f"{where}: tool {tool.name!r} is configured twice (by name and alias)")
        else:
            settings[tool.name] = values
    bound = []
    for tool in tools:
        try:
            bound.append(configure_tool(tool, settings.get(tool.name)))
        except ToolSettingsError as e:
            problems.append(f"agent.init_config.tool_config.{tool.name}: {e}")
    if problems:
        raise ToolConfigError(problems)
    return bound
