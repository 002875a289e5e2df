"""The @tool registry, schemas from type hints and docstrings, and run_tool_call's error paths."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import TYPE_CHECKING, Literal, Optional

import pytest

from agentfly.core.registry import UnknownNameError
from agentfly.rollout.tools import TOOLS, Tool, ToolResult, get_tool, run_tool_call, tool
from agentfly.rollout.tools.schema import parse_docstring

if TYPE_CHECKING:  # not defined at run time: the schema must not need it
    from agentfly.rollout.execution.sandbox import PythonSession


def call(name: str, arguments: object) -> ToolResult:
    return asyncio.run(run_tool_call(name, arguments))


def timed_call(name: str, arguments: object) -> tuple[ToolResult, float]:
    """The result and the seconds until it came back (``asyncio.run`` itself also waits for
    abandoned worker threads on exit, so time inside the loop)."""

    async def timed() -> tuple[ToolResult, float]:
        start = time.monotonic()
        result = await run_tool_call(name, arguments)
        return result, time.monotonic() - start

    return asyncio.run(timed())


def _weather(
    city: str,
    days: int,
    unit: Literal["C", "F"] = "C",
    detailed: bool = False,
    threshold: Optional[float] = None,  # noqa: UP045 - the old spelling must work too
    tags: list[str] | None = None,
    extra: dict | None = None,
) -> str:
    """Forecast for a city.

    Looks the city up and returns one line per day.

    Args:
        city: the city's name.
        days (int): how many days,
            counted from today.
        unit: temperature unit.
        detailed: include wind and rain.
        threshold: only days warmer than this.
        tags: labels to attach.
        extra: anything else.

    Returns:
        The forecast text.
    """
    return f"{city}:{days}:{unit}:{detailed}:{threshold}:{tags}:{extra}"


weather = tool(_weather, name="test_base_weather", aliases=("test_base_forecast",))


@tool(name="test_base_raises")
def _raises(x: int) -> str:
    """Always fails.

    Args:
        x: ignored.
    """
    raise RuntimeError(f"boom {x}")


@tool(name="test_base_hangs", timeout=0.3)
def _hangs() -> str:
    """Sleeps far past its timeout."""
    time.sleep(1.5)
    return "late"


@tool(name="test_base_async_hangs", timeout=0.3)
async def _async_hangs() -> str:
    """Awaits far past its timeout."""
    await asyncio.sleep(30)
    return "late"


@tool(name="test_base_object")
def _returns_object() -> object:
    """Returns something that is not text."""
    return object()


@tool(name="test_base_none")
def _returns_none() -> None:
    """Returns nothing."""


@tool(name="test_base_json")
def _returns_json(n: int) -> dict:
    """Returns a dict.

    Args:
        n: a number.
    """
    return {"n": n, "square": n * n}


@tool(name="test_base_long", max_output_chars=10)
def _long() -> str:
    """Returns 25 characters."""
    return "abcdefghijklmnopqrstuvwxy"


@tool(name="test_base_async")
async def _async_echo(text: str) -> str:
    """Echoes asynchronously.

    Args:
        text: what to echo.
    """
    await asyncio.sleep(0)
    return text.upper()


@tool(name="test_base_sleeps")
def _sleeps(seconds: float) -> str:
    """Blocks its thread.

    Args:
        seconds: how long.
    """
    time.sleep(seconds)
    return "done"


class _Recorded:
    """A resource that records that it was made and closed."""

    made: list[_Recorded] = []  # noqa: RUF012

    def __init__(self) -> None:
        self.closed = False
        _Recorded.made.append(self)

    def close(self) -> None:
        self.closed = True


@tool(name="test_base_recorded", stateful=True, resource_factory=_Recorded)
def _uses_recorded(resource: _Recorded) -> str:
    """Says whether its resource is closed yet."""
    return "closed" if resource.closed else "open"


def test_schema_from_type_hints_and_docstring() -> None:
    expected = {
        "type": "function",
        "function": {
            "name": "test_base_weather",
            "description": "Forecast for a city.\n\nLooks the city up and returns one line per day.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "the city's name."},
                    "days": {
                        "type": "integer",
                        "description": "how many days, counted from today.",
                    },
                    "unit": {
                        "type": "string",
                        "enum": ["C", "F"],
                        "description": "temperature unit.",
                    },
                    "detailed": {"type": "boolean", "description": "include wind and rain."},
                    "threshold": {"type": "number", "description": "only days warmer than this."},
                    "tags": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "labels to attach.",
                    },
                    "extra": {"type": "object", "description": "anything else."},
                },
                "required": ["city", "days"],
            },
        },
    }
    assert weather.schema == expected
    assert json.loads(json.dumps(weather.schema)) == expected  # plain JSON


def test_docstring_parser_ignores_other_sections() -> None:
    description, args = parse_docstring(
        """Short.

        Args:
            a: first.
            b (str): second,
                continued.

        Raises:
            ValueError: never an argument.
        """
    )
    assert description == "Short."
    assert args == {"a": "first.", "b": "second, continued."}


def test_resource_parameter_is_not_in_the_schema() -> None:
    @tool(name="test_base_stateful", stateful=True, resource_factory=dict)
    def stateful(key: str, resource: PythonSession) -> str:
        """Remembers keys.

        Args:
            key: a key.
        """
        return key

    assert list(stateful.parameters["properties"]) == ["key"]
    assert stateful.parameters["required"] == ["key"]


def test_decorator_returns_a_registered_callable_tool() -> None:
    assert isinstance(weather, Tool)
    assert get_tool("test_base_weather") is weather
    assert get_tool("test_base_forecast") is weather  # alias
    assert weather("Oslo", 2) == "Oslo:2:C:False:None:None:None"  # still a function
    assert "test_base_weather" in TOOLS.names()


def test_registering_another_function_under_a_taken_name_is_refused() -> None:
    with pytest.raises(ValueError, match="already registered"):

        @tool(name="test_base_weather")
        def impostor(city: str) -> str:
            return city


def test_bad_declarations_are_refused() -> None:
    with pytest.raises(TypeError, match=r"\*args"):

        @tool(name="test_base_varargs")
        def varargs(*values: int) -> str:
            return ""

    with pytest.raises(TypeError, match="resource_factory"):

        @tool(name="test_base_no_factory", stateful=True)
        def no_factory(resource: object) -> str:
            return ""

    assert "test_base_varargs" not in TOOLS and "test_base_no_factory" not in TOOLS


def test_get_tool_unknown_lists_known_names() -> None:
    with pytest.raises(UnknownNameError) as info:
        get_tool("calculater")
    assert "calculator" in str(info.value) and "search" in str(info.value)


def test_run_tool_call_accepts_dict_and_json_string() -> None:
    by_dict = call("test_base_weather", {"city": "Oslo", "days": 3, "unit": "F"})
    by_json = call("test_base_forecast", '{"city": "Oslo", "days": 3, "unit": "F"}')
    assert by_dict == by_json == ToolResult("Oslo:3:F:False:None:None:None")
    assert by_dict.ok and by_dict.error is None and not by_dict.ends_chain


def test_unknown_tool_observation_lists_known_tools() -> None:
    result = call("no_such_tool", {})
    assert not result.ok and result.error == "unknown_tool"
    for name in ("calculator", "code_interpreter", "search", "answer"):
        assert name in result.observation


@pytest.mark.parametrize(
    ("arguments", "needle"),
    [
        ('{"city": "Oslo", "days": ', "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ({"city": "Oslo"}, "missing required argument(s): days"),
        ({"city": "Oslo", "days": 1, "colour": "red"}, "unknown argument(s): colour"),
        ({"city": "Oslo", "days": "three"}, "argument 'days': expected integer"),
        ({"city": "Oslo", "days": True}, "argument 'days': expected integer"),
        ({"city": "Oslo", "days": 1, "unit": "K"}, "'K' is not one of ['C', 'F']"),
    ],
)
def test_invalid_arguments_become_an_observation(arguments: object, needle: str) -> None:
    result = call("test_base_weather", arguments)
    assert not result.ok and result.error == "invalid_arguments"
    assert needle in result.observation
    assert result.observation.startswith("Error calling test_base_weather:")


def test_integer_is_accepted_where_a_number_is_expected() -> None:
    result = call("test_base_weather", {"city": "A", "days": 1, "threshold": 3})
    assert result.ok and result.observation == "A:1:C:False:3.0:None:None"


def test_tool_that_raises() -> None:
    result = call("test_base_raises", {"x": 7})
    assert not result.ok and result.error == "exception"
    assert "RuntimeError: boom 7" in result.observation


def test_sync_tool_past_its_timeout() -> None:
    result, seconds = timed_call("test_base_hangs", {})
    assert seconds < 1.2  # returned at the 0.3 s timeout, not after the 1.5 s sleep
    assert not result.ok and result.error == "timeout"
    assert "0.3 seconds" in result.observation


def test_async_tool_past_its_timeout() -> None:
    result, seconds = timed_call("test_base_async_hangs", {})
    assert seconds < 1.2
    assert not result.ok and result.error == "timeout"


@pytest.mark.parametrize("name", ["test_base_object", "test_base_none"])
def test_tool_returning_something_not_text(name: str) -> None:
    result = call(name, {})
    assert not result.ok and result.error == "malformed_output"
    assert name in result.observation


def test_json_serialisable_output_is_dumped_and_said_once(caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="agentfly"):
        result = call("test_base_json", {"n": 12})
        again = call("test_base_json", {"n": 3})
    assert result.ok and json.loads(result.observation) == {"n": 12, "square": 144}
    assert again.ok and json.loads(again.observation) == {"n": 3, "square": 9}
    said = [r.getMessage() for r in caplog.records if "test_base_json" in r.getMessage()]
    assert len(said) == 1 and "returned a dict, not text: the model sees it as JSON" in said[0], said


def test_output_is_truncated_with_a_marker() -> None:
    result = call("test_base_long", {})
    assert result.ok
    assert result.observation.startswith("abcdefghij\n")
    assert "truncated: 15 more characters" in result.observation
    assert "k" not in result.observation.split("\n")[0]


def test_async_tool() -> None:
    assert call("test_base_async", {"text": "hi"}).observation == "HI"


def test_slow_sync_tools_do_not_block_each_other() -> None:
    """Sync tools run in worker processes, as many at once as the pool has workers."""
    from agentfly.rollout.execution.workers import WorkerPool

    async def six_at_once(workers: WorkerPool, seconds: float) -> list[ToolResult]:
        calls = (
            run_tool_call("test_base_sleeps", {"seconds": seconds}, workers=workers)
            for _ in range(6)
        )
        return await asyncio.gather(*calls)

    with WorkerPool(6) as workers:
        asyncio.run(six_at_once(workers, 0.2))  # six workers started
        start = time.monotonic()
        results = asyncio.run(six_at_once(workers, 0.5))
        assert time.monotonic() - start < 1.5  # serially it would take 3 s
    assert all(r.observation == "done" for r in results)


def test_answer_ends_the_chain() -> None:
    result = call("answer", {"answer": "42"})
    assert result.ok and result.ends_chain and result.final_answer == "42"


def test_a_stateful_call_without_a_resource_closes_the_one_made_for_it() -> None:
    _Recorded.made.clear()
    own = _Recorded()
    assert call("test_base_recorded", {}).observation == "open"  # made for this call, then closed
    assert asyncio.run(run_tool_call("test_base_recorded", {}, resource=own)).ok
    assert [r is own for r in _Recorded.made] == [True, False]
    assert [r.closed for r in _Recorded.made] == [False, True]  # the one passed in stays open
