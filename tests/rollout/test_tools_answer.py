"""The answer tools (``answer`` and AgentFly's ``answer_math``/``answer_qa``) and ``summarize``."""

from __future__ import annotations

import asyncio

import pytest

from agentfly.rollout.tools import get_tool, run_tool_call


@pytest.mark.parametrize(
    ("name", "description"),
    [  # AgentFly's descriptions (tools/src/react/tools.py), as the model sees them
        (
            "answer_math",
            "Give the final answer. The answer should be put inside the \\boxed{} tag.",
        ),
        ("answer_qa", "Give the final answer. The answer should be simple, short, and direct."),
    ],
)
def test_agentfly_answer_tools_end_the_chain(name, description):
    assert get_tool(name).description == description
    assert get_tool(name).parameters["required"] == ["answer"]
    result = asyncio.run(run_tool_call(name, {"answer": "\\boxed{72}"}))
    assert result.ok and result.ends_chain
    assert result.final_answer == result.observation == "\\boxed{72}"


def test_summarize_answers_as_agentfly_does():
    result = asyncio.run(run_tool_call("summarize", {"summary": "searched twice"}))
    assert result.ok and not result.ends_chain
    assert result.observation == "[Previous Summary]: searched twice"
