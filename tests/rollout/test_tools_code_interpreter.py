"""The code_interpreter tool: per-chain Python sessions through run_tool_call."""

from __future__ import annotations

import asyncio
import functools

import pytest

from agentfly.rollout.execution.sandbox import PythonSession
from agentfly.rollout.tools import get_tool, run_tool_call
from agentfly.rollout.tools.resources import ResourcePool


def test_schema_and_alias() -> None:
    tool = get_tool("python_executor")
    assert tool is get_tool("code_interpreter") and tool.stateful
    assert tool.parameters == {
        "type": "object",
        "properties": {"code": {"type": "string", "description": "the Python code to run."}},
        "required": ["code"],
    }


@pytest.mark.needs_bwrap
def test_state_persists_within_a_chain_and_not_across_chains() -> None:
    async def main() -> list[str]:
        pool = ResourcePool(max_per_tool=4)
        async with pool.chain("a") as a, pool.chain("b") as b:
            observations = [
                (await run_tool_call("code_interpreter", {"code": "total = 6 * 7"}, resource=a)),
                (await run_tool_call("python_executor", {"code": "print(total)"}, resource=a)),
                (await run_tool_call("code_interpreter", {"code": "total"}, resource=b)),
            ]
            assert pool.live("code_interpreter") == 2
        assert pool.live("code_interpreter") == 0
        return observations

    set_total, same_chain, other_chain = asyncio.run(main())
    assert set_total.ok and set_total.observation == "(no output)"
    assert same_chain.ok and same_chain.observation == "42"
    assert "NameError: name 'total' is not defined" in other_chain.observation


@pytest.mark.needs_bwrap
def test_timeout_gives_a_timeout_observation_and_loses_state() -> None:
    fast = functools.partial(PythonSession, timeout=1.0)

    async def main() -> tuple:
        pool = ResourcePool(factories={"code_interpreter": fast})
        async with pool.chain(0) as chain:
            await run_tool_call("code_interpreter", {"code": "kept = 1"}, resource=chain)
            hung = await run_tool_call(
                "code_interpreter", {"code": "while True: pass"}, resource=chain
            )
            after = await run_tool_call("code_interpreter", {"code": "kept"}, resource=chain)
            again = await run_tool_call(
                "code_interpreter", {"code": "kept = 2; kept"}, resource=chain
            )
        return hung, after, again

    hung, after, again = asyncio.run(main())
    assert not hung.ok and hung.error == "cell_timeout"
    assert "ran past 1 seconds" in hung.observation and "variables are lost" in hung.observation
    assert "NameError" in after.observation  # the state went with the killed worker
    assert again.observation == "2"


@pytest.mark.needs_bwrap
def test_without_a_pool_each_call_gets_a_throwaway_session() -> None:
    async def main() -> tuple:
        first = await run_tool_call("code_interpreter", {"code": "v = 1; v"})
        second = await run_tool_call("code_interpreter", {"code": "v"})
        return first, second

    first, second = asyncio.run(main())
    assert first.observation == "1"
    assert "NameError" in second.observation


@pytest.mark.needs_bwrap
def test_errors_and_stderr_reach_the_model() -> None:
    code = "import sys\nprint('out')\nprint('warn', file=sys.stderr)\nint('x')"
    result = asyncio.run(run_tool_call("code_interpreter", {"code": code}))
    lines = result.observation.splitlines()
    assert lines[:2] == ["out", "warn"]
    assert lines[-1] == "ValueError: invalid literal for int() with base 10: 'x'"
