"""``run_tool_call``: run one tool call from the model and never raise.

Every failure (unknown tool, arguments that are not JSON or do not fit the schema, a tool that
raises, hangs past its timeout or returns something that is not text) becomes an error
observation the model can read, with ``ok=False`` and a short error kind.

Sync tools run in a worker thread so that a slow tool does not stall the other chains on the
event loop. A timed-out sync tool's thread cannot be killed; it runs on in the background, which
is why tools that run untrusted code (``code_interpreter``) enforce their own limits in a
separate process and return before the outer timeout.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from agentfly.plugins import is_object_spec
from agentfly.registry import UnknownNameError
from agentfly.rollout.tools.base import (
    EXCEPTION,
    INVALID_ARGUMENTS,
    MALFORMED_OUTPUT,
    TIMEOUT,
    TOOLS,
    UNKNOWN_TOOL,
    Tool,
    ToolResult,
    get_tool,
)
from agentfly.rollout.tools.schema import validate_arguments

logger = logging.getLogger(__name__)


def truncate(text: str, max_chars: int) -> str:
    """Cut ``text`` to ``max_chars`` characters, saying how much was left out."""
    if len(text) <= max_chars:
        return text
    return f"{text[:max_chars]}\n... [output truncated: {len(text) - max_chars} more characters]"


def parse_arguments(arguments: dict[str, Any] | str | None) -> dict[str, Any] | str:
    """The arguments as a dict, or an error message when they are not a JSON object."""
    if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
        return {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as e:
            return f"the arguments are not valid JSON ({e.msg} at position {e.pos})"
    if not isinstance(arguments, dict):
        return f"the arguments must be a JSON object, got {type(arguments).__name__}"
    return dict(arguments)


def _as_result(value: Any, tool: Tool) -> ToolResult:
    if isinstance(value, ToolResult):
        result = value
    elif isinstance(value, str):
        result = ToolResult(observation=value)
    else:
        try:
            if value is None:
                raise TypeError("None")
            result = ToolResult(observation=json.dumps(value, ensure_ascii=False))
        except (TypeError, ValueError):
            return ToolResult.failure(
                MALFORMED_OUTPUT,
                f"Error: tool {tool.name!r} returned {type(value).__name__}, which is not text "
                "(a bug in the tool, not in your call).",
            )
    result.observation = truncate(str(result.observation), tool.max_output_chars)
    return result


async def _invoke(tool: Tool, kwargs: dict[str, Any]) -> Any:
    if tool.takes_settings:
        kwargs["settings"] = tool.settings
    if tool.is_async:
        return await asyncio.wait_for(tool.fn(**kwargs), tool.timeout)
    return await asyncio.wait_for(asyncio.to_thread(tool.fn, **kwargs), tool.timeout)


async def _close(resource: Any) -> None:
    close = getattr(resource, "close", None)
    if close is None:
        return
    if asyncio.iscoroutinefunction(close):
        await close()
    else:
        await asyncio.to_thread(close)


async def run_tool_call(
    name: str | Tool, arguments: dict[str, Any] | str | None, *, resource: Any = None
) -> ToolResult:
    """Run the tool ``name`` on ``arguments``; every failure becomes an error observation.

    Args:
        name: the tool name (or alias) the model used, looked up in the registry, or the
            ``Tool`` itself (a configured copy, see :meth:`Tool.configure`).
        arguments: a dict, or the JSON string the model wrote.
        resource: for a stateful tool, its per-chain resource, or a ``ChainResources`` to take
            it from. Without one, a throwaway resource is made for this call and closed after.

    Returns:
        The ``ToolResult``; never raises (except ``asyncio.CancelledError``).
    """
    if isinstance(name, str) and is_object_spec(name) and name not in TOOLS:
        # a name from the model never imports anything: module:attr tools are imported when
        # the config is composed
        return ToolResult.failure(UNKNOWN_TOOL, f"Error: unknown tool {name!r}.")
    try:
        tool = name if isinstance(name, Tool) else get_tool(name)
    except UnknownNameError as e:
        return ToolResult.failure(UNKNOWN_TOOL, f"Error: {e}")
    if tool.settings_type is not None and tool.settings is None:
        return ToolResult.failure(
            EXCEPTION,
            f"Error: tool {tool.name!r} is not configured: set its settings in "
            f"agent.init_config.tool_config.{tool.name} (a bug in the setup, not in your call).",
        )
    kwargs = parse_arguments(arguments)
    if isinstance(kwargs, str):
        return ToolResult.failure(INVALID_ARGUMENTS, f"Error calling {tool.name}: {kwargs}.")
    problems = validate_arguments(kwargs, tool.parameters)
    if problems:
        return ToolResult.failure(
            INVALID_ARGUMENTS, f"Error calling {tool.name}: {'; '.join(problems)}."
        )

    throwaway = None
    try:
        if tool.stateful:
            from agentfly.rollout.resources import ChainResources

            if isinstance(resource, ChainResources):
                resource = await resource.get(tool)
            elif resource is None:
                resource = throwaway = await asyncio.to_thread(tool.new_resource)
            kwargs["resource"] = resource
        value = await _invoke(tool, kwargs)
    except (TimeoutError, asyncio.TimeoutError):  # distinct classes before Python 3.11
        return ToolResult.failure(
            TIMEOUT, f"Error: tool {tool.name!r} did not finish within {tool.timeout:g} seconds."
        )
    except (Exception, SystemExit) as e:
        logger.debug("tool %s raised", tool.name, exc_info=True)
        return ToolResult.failure(
            EXCEPTION, f"Error: tool {tool.name!r} failed: {type(e).__name__}: {e}"
        )
    finally:
        if throwaway is not None:
            try:
                await _close(throwaway)
            except Exception:
                logger.warning("closing a %s resource failed", tool.name, exc_info=True)
    return _as_result(value, tool)
