"""Tools the model is never shown: why every call of a tool can fail its arguments.

An agent type such as ``hermes`` hands the tools' JSON schemas to the chat template, which shows
them in the system turn (``qwen2.5``). A template that shows none (``qwen2.5-no-system-tool``,
made for models trained on a fixed set of tools) leaves the model to guess a tool's arguments:
a model warm-started on ``calculator`` calls a plug-in tool with well-formed JSON and
``calculator``'s arguments, and every such call counts as ``invalid_arguments``. The calls are
parsed and checked alike under both templates; only what the model saw differs. When that
happens, :func:`explain_invalid_arguments` says so once per tool, with the fix.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from agentfly.rollout.tools.base import INVALID_ARGUMENTS

logger = logging.getLogger(__name__)

#: calls of a tool in one rollout, all with invalid arguments, before the template is named
MIN_CALLS = 4


def shows_tool_schemas(template: Any, agent: Any) -> bool:
    """Whether the model sees the tools' schemas: the agent describes its tools itself (in its
    prompt), or the template renders the schemas the agent hands it."""
    tools = agent.template_tools()
    if not tools:
        return True
    messages = [{"role": "user", "content": "?"}]
    return template.render(messages, tools) != template.render(messages, None)


def explain_invalid_arguments(
    trajs: Iterable[Any], tool_names: Iterable[str], template_name: str, told: set[str]
) -> None:
    """Warn once per tool of ``tool_names`` (``told`` holds those named already) whose every
    call in ``trajs`` (at least :data:`MIN_CALLS`) was well-formed JSON with arguments it does not
    take, naming the template that hid its schema. Call it only when the template shows no tool
    schemas."""
    known = set(tool_names)
    calls: dict[str, list[Any]] = {}
    for t in trajs:
        for c in t.tool_calls:
            if c.name in known:
                calls.setdefault(c.name, []).append(c)
    for name, made in calls.items():
        well_formed = all(c.error == INVALID_ARGUMENTS and isinstance(c.arguments, dict) for c in made)
        if name in told or len(made) < MIN_CALLS or not well_formed:
            continue
        told.add(name)
        logger.warning(
            "every call of tool %r in this rollout (%d) had arguments it does not take, e.g. %s; "
            "chat template %r shows the model no tool schemas, so the model knows only the "
            "arguments of tools it was trained on: use a template that shows them (qwen2.5) or "
            "describe the tool in agent.init_config.system_prompt",
            name, len(made), made[0].observation.strip(), template_name,
        )


def explain_uncalled_tools(
    trajs: Iterable[Any], tool_names: Iterable[str], template_name: str, system_prompt: str | None,
    told: set[str],
) -> None:
    """Warn once per tool of ``tool_names`` (``told`` holds those named already) that no chain of
    ``trajs`` (at least :data:`MIN_CALLS` of them) called and whose name the system prompt does
    not mention: the model is shown it nowhere, so it cannot know the tool exists. Nothing is
    said of a rollout with a call too broken to name its tool. Call it only when the template
    shows no tool schemas."""
    trajs = list(trajs)
    called = {c.name for t in trajs for c in t.tool_calls}
    if len(trajs) < MIN_CALLS or "" in called:  # a call too broken to name its tool: it may be one
        return
    others = sorted(called - set(tool_names))
    for name in tool_names:
        if name in told or name in called or name in (system_prompt or ""):
            continue
        told.add(name)
        logger.warning(
            "no chain of this rollout (%d) called tool %r%s: chat template %r shows the model no "
            "tool schemas and the system prompt does not name it, so the model cannot know it "
            "exists: use a template that shows them (qwen2.5) or describe the tool in "
            "agent.init_config.system_prompt",
            len(trajs), name, f" (they called tools they do not have: {', '.join(others)})" if others else "",
            template_name,
        )
