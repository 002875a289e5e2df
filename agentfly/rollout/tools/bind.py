"""A run's tools: the names in ``agent.init_config.tools``, each bound to its ``tool_config``
settings (:func:`~agentfly.rollout.tools.settings.configure_tool`).

The tools acting on one environment (``Tool.environment``) share one per chain, so they share
its settings: ``tool_config.alfworld_step.data_dir`` configures the environment of every ALFWorld
tool of the run (two of them giving one setting different values is refused). Each keeps its own
``timeout`` and ``max_output_chars``.
"""

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
    problems += _share_environment_settings(tools, settings)
    bound = []
    for tool in tools:
        try:
            bound.append(configure_tool(tool, settings.get(tool.name)))
        except ToolSettingsError as e:
            problems.append(f"agent.init_config.tool_config.{tool.name}: {e}")
    problems += [_backstop_problem(t) for t in bound if _backstop_problem(t)]
    if problems:
        raise ToolConfigError(problems)
    return bound


PER_TOOL_SETTINGS = ("timeout", "max_output_chars")


def _share_environment_settings(tools: Sequence[Tool], settings: dict[str, Mapping[str, Any]]) -> list[str]:
    """Give every tool of an environment the environment's settings given to any of them (in
    ``settings``, in place); the problems: one setting given two values."""
    problems = []
    groups: dict[str, list[Tool]] = {}
    for tool in tools:
        if tool.environment is not None:
            groups.setdefault(tool.environment, []).append(tool)
    for environment, group in groups.items():
        shared: dict[str, Any] = {}
        given_by: dict[str, str] = {}
        for tool in group:
            for key, value in (settings.get(tool.name) or {}).items():
                if key in PER_TOOL_SETTINGS:
                    continue
                if key in shared and shared[key] != value:
                    problems.append(
                        f"agent.init_config.tool_config: tools {given_by[key]!r} and {tool.name!r} act "
                        f"on one {environment} environment per chain and set its {key} to "
                        f"{shared[key]!r} and {value!r}; give it once"
                    )
                shared.setdefault(key, value)
                given_by.setdefault(key, tool.name)
        for tool in group:
            own = {k: v for k, v in (settings.get(tool.name) or {}).items() if k in PER_TOOL_SETTINGS}
            if shared or own:
                settings[tool.name] = {**shared, **own}
    return problems


def _backstop_problem(tool: Tool) -> str:
    """An environment tool's timeout must outlast its environment's own deadlines."""
    longest = getattr(tool.settings, "longest_call", None)
    if tool.environment is None or not callable(longest) or tool.timeout > longest():
        return ""
    return (
        f"agent.init_config.tool_config.{tool.name}: timeout={tool.timeout:g} s must exceed its "
        f"environment's step_timeout and reset_timeout ({longest():g} s): those kill a hung "
        "environment and fail the chain; the tool's timeout is only the backstop"
    )
