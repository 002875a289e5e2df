"""``run_tool_call``: run one tool call from the model and never raise.

Every failure (unknown tool, arguments that are not JSON or do not fit the schema, a tool that
raises, hangs past its timeout, kills its worker or returns something that is not text) becomes
an error observation the model can read, with ``ok=False`` and a short error kind.

Where a call runs:

- a sync stateless tool: a worker process of a :class:`~agentfly.rollout.execution.workers.WorkerPool`
  (the one given, else the process's default pool). Its timeout counts from when a worker takes
  it; a call past it has its worker killed (``timeout``), and one that waited past the pool's
  queue bound without running fails as ``queue_timeout`` (the pool is too small). The result is
  turned into text and cut to ``max_output_chars`` in the worker, so a huge return value never
  reaches the trainer;
- a sync tool declared ``runs_in="thread"``, or a stateful one (its resource lives in the
  trainer: ``code_interpreter`` runs its code in a process of its own, with its own limits): a
  daemon thread of the package (:data:`~agentfly.rollout.execution.daemon_threads.THREADS`); a call past its
  timeout is abandoned, its thread runs on, but nothing waits for it;
- an async tool: awaited on the event loop under ``asyncio.wait_for``. It must not block the
  loop (no ``time.sleep``, no blocking I/O): a blocked loop stalls every chain, and
  ``wait_for`` cannot interrupt it.

Given the run's :class:`~agentfly.rollout.tools.breaker.ToolBreakers`, every call's outcome is
counted there, and a tool whose calls keep failing raises
:class:`~agentfly.rollout.tools.breaker.ToolBroken` instead of answering: the run stops.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from agentfly.core.plugins import is_object_spec
from agentfly.core.registry import UnknownNameError
from agentfly.rollout.execution.daemon_threads import THREADS
from agentfly.rollout.execution.function_ref import by_reference
from agentfly.rollout.execution.workers import (
    ReplyTooLarge,
    WorkerDied,
    WorkerPool,
    WorkerQueueTimeout,
    WorkerStartError,
    default_pool,
    describe_error,
    wait_call,
)
from agentfly.rollout.tools.base import (
    EXCEPTION,
    INVALID_ARGUMENTS,
    MALFORMED_OUTPUT,
    OUTPUT_TOO_LARGE,
    QUEUE_TIMEOUT,
    TIMEOUT,
    TOOLS,
    UNAVAILABLE,
    UNKNOWN_TOOL,
    WORKER_DIED,
    Tool,
    ToolResult,
    ToolUnavailableError,
    get_tool,
)
from agentfly.rollout.tools.breaker import ToolBreakers
from agentfly.rollout.tools.schema import validate_arguments

logger = logging.getLogger(__name__)
_SAID_AS_JSON: set[tuple[str, str]] = set()  # (tool, type) whose return was shown as JSON, said once


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


def _as_result(value: Any, name: str, max_output_chars: int) -> ToolResult:
    """A tool's return value as a ``ToolResult`` whose observation is text of at most
    ``max_output_chars`` characters (and the truncation marker)."""
    if isinstance(value, ToolResult):
        result = value
    elif isinstance(value, str):
        result = ToolResult(observation=value)
    else:
        try:
            if value is None:
                raise TypeError("None")
            result = ToolResult(observation=json.dumps(value, ensure_ascii=False), shown_as_json=type(value).__name__)
        except (TypeError, ValueError):
            return ToolResult.failure(
                MALFORMED_OUTPUT,
                f"Error: tool {name!r} returned {type(value).__name__}, which is not text "
                "(a bug in the tool, not in your call).",
            )
    result.observation = truncate(str(result.observation), max_output_chars)
    return result


def call_in_worker(
    fn: Any, kwargs: dict[str, Any], name: str, max_output_chars: int
) -> ToolResult:
    """Run in a worker process: the call and its ``ToolResult``, cut before it is sent back."""
    return _as_result(fn(**kwargs), name, max_output_chars)


async def _invoke(tool: Tool, kwargs: dict[str, Any], workers: WorkerPool | None) -> ToolResult:
    """The call, where the tool runs (module docstring); a failure raises."""
    if tool.takes_settings:
        kwargs["settings"] = tool.settings
    if tool.is_async:
        return await _await_on_loop(tool, kwargs)
    elif not tool.runs_in_process:  # stateful, or declared runs_in="thread"
        return await _run_on_thread(tool, kwargs)
    return await _run_in_worker(tool, kwargs, workers)


async def _await_on_loop(tool: Tool, kwargs: dict[str, Any]) -> ToolResult:
    """An async tool, awaited on the event loop under its timeout."""
    value = await asyncio.wait_for(tool.fn(**kwargs), tool.timeout)
    return _as_result(value, tool.name, tool.max_output_chars)


async def _run_on_thread(tool: Tool, kwargs: dict[str, Any]) -> ToolResult:
    """A sync tool on a daemon thread, abandoned (not stopped) at its timeout."""
    value = await wait_call(THREADS.submit(tool.fn, **kwargs), tool.timeout, pool=None)
    return _as_result(value, tool.name, tool.max_output_chars)


async def _run_in_worker(tool: Tool, kwargs: dict[str, Any], workers: WorkerPool | None) -> ToolResult:
    """A sync stateless tool in a worker process, killed at its timeout; the worker turns the
    value into the cut ``ToolResult`` (:func:`call_in_worker`)."""
    pool = workers if workers is not None else default_pool()
    future = pool.submit(
        call_in_worker, (by_reference(tool.fn), kwargs, tool.name, tool.max_output_chars),
        timeout=tool.timeout, label=f"tool {tool.name!r}",
    )
    return await wait_call(future, tool.timeout, pool=pool)


async def _close(resource: Any) -> None:
    close = getattr(resource, "close", None)
    if close is None:
        return
    if asyncio.iscoroutinefunction(close):
        await close()
    else:
        await asyncio.wrap_future(THREADS.submit(close))


def _tool_or_failure(name: str | Tool) -> Tool | ToolResult:
    """The tool the model named, ready to call, or the error observation saying why not."""
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
    return tool


def _arguments_or_failure(
    tool: Tool, arguments: dict[str, Any] | str | None
) -> dict[str, Any] | ToolResult:
    """The call's keyword arguments, or the error observation when they do not fit the schema."""
    kwargs = parse_arguments(arguments)
    if isinstance(kwargs, str):
        return ToolResult.failure(INVALID_ARGUMENTS, f"Error calling {tool.name}: {kwargs}.")
    problems = validate_arguments(kwargs, tool.parameters)
    if problems:
        return ToolResult.failure(
            INVALID_ARGUMENTS, f"Error calling {tool.name}: {'; '.join(problems)}."
        )
    return kwargs


async def _resource_for(tool: Tool, resource: Any) -> tuple[Any, Any]:
    """A stateful tool's resource for this call, and the same again when it was made for this
    call alone (to close after it), else None."""
    from agentfly.rollout.tools.resources import ChainResources

    if isinstance(resource, ChainResources):
        return await resource.get(tool), None
    if resource is None:
        throwaway = await asyncio.wrap_future(THREADS.submit(tool.new_resource))
        return throwaway, throwaway
    return resource, None


def _failure_of(tool: Tool, error: BaseException) -> ToolResult:
    """The error observation for what a call raised, with its kind."""
    if isinstance(error, TimeoutError | asyncio.TimeoutError):  # distinct classes before Python 3.11
        return ToolResult.failure(
            TIMEOUT, f"Error: tool {tool.name!r} did not finish within {tool.timeout:g} seconds."
        )
    if isinstance(error, WorkerQueueTimeout):
        return ToolResult.failure(QUEUE_TIMEOUT, f"Error: tool {tool.name!r} did not run: {error}.")
    if isinstance(error, WorkerDied):
        return ToolResult.failure(
            WORKER_DIED,
            f"Error: tool {tool.name!r} failed: the process running it died ({error.how}).",
        )
    if isinstance(error, ReplyTooLarge):
        return ToolResult.failure(
            OUTPUT_TOO_LARGE, f"Error: tool {tool.name!r} returned too much: {error}."
        )
    if isinstance(error, ToolUnavailableError):
        return ToolResult.failure(UNAVAILABLE, f"Error: tool {tool.name!r} is unavailable: {error}")
    logger.debug("tool %s raised", tool.name, exc_info=error)
    return ToolResult.failure(EXCEPTION, f"Error: tool {tool.name!r} failed: {describe_error(error)}")


async def run_tool_call(
    name: str | Tool,
    arguments: dict[str, Any] | str | None,
    *,
    resource: Any = None,
    workers: WorkerPool | None = None,
    breakers: ToolBreakers | None = None,
) -> ToolResult:
    """Run the tool ``name`` on ``arguments``; every failure becomes an error observation.

    Args:
        name: the tool name (or alias) the model used, looked up in the registry, or the
            ``Tool`` itself (a configured copy, see :meth:`Tool.configure`).
        arguments: a dict, or the JSON string the model wrote.
        resource: for a stateful tool, its per-chain resource, or a ``ChainResources`` to take
            it from. Without one, a throwaway resource is made for this call and closed after.
        workers: the worker pool of sync stateless tools (None: the process's default pool).
        breakers: the run's tool breakers, which count the call (None: not counted).

    Returns:
        The ``ToolResult``; never raises (except ``asyncio.CancelledError``).

    Raises:
        WorkerStartError: the worker pool cannot start a worker (a setup error: every call
            would fail alike).
        ToolBroken: the tool's breaker has tripped, before this call or with it.
    """
    tool = _tool_or_failure(name)
    if isinstance(tool, ToolResult):
        return tool
    kwargs = _arguments_or_failure(tool, arguments)
    if isinstance(kwargs, ToolResult):
        return kwargs
    if breakers is None:
        return await _run(tool, kwargs, resource, workers)
    call = breakers.start(tool.name)
    try:
        result = await _run(tool, kwargs, resource, workers)
    except BaseException:  # cancelled, or the pool cannot start: no verdict on the tool
        breakers.cancel(tool.name, call)
        raise
    breakers.record(tool.name, call, None if result.ok else result.error, result.observation)
    return result


def _said(name: str, result: ToolResult) -> ToolResult:
    """``result``, its JSON-for-text said once per tool and type (in this process, wherever the
    tool ran)."""
    if result.shown_as_json is not None and (name, result.shown_as_json) not in _SAID_AS_JSON:
        _SAID_AS_JSON.add((name, result.shown_as_json))
        logger.warning(
            "tool %r returned a %s, not text: the model sees it as JSON (%s); return a str to "
            "choose the text it sees", name, result.shown_as_json, result.observation[:80],
        )
    return result


async def _run(
    tool: Tool, kwargs: dict[str, Any], resource: Any, workers: WorkerPool | None
) -> ToolResult:
    """The call, its failure as an error observation, its throwaway resource closed."""
    throwaway = None
    try:
        if tool.stateful:
            kwargs["resource"], throwaway = await _resource_for(tool, resource)
        return _said(tool.name, await _invoke(tool, kwargs, workers))
    except WorkerStartError:
        raise
    except (Exception, SystemExit) as e:
        return _failure_of(tool, e)
    finally:
        if throwaway is not None:
            try:
                await _close(throwaway)
            except Exception:
                logger.warning("closing a %s resource failed", tool.name, exc_info=True)
