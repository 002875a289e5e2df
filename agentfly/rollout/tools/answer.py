"""``answer``: the model's final response; calling it ends the chain."""

from __future__ import annotations

from agentfly.rollout.tools.base import ToolResult, tool


@tool(name="answer", runs_in="thread")  # builds a ToolResult: nothing to contain
def answer(answer: str) -> ToolResult:
    """Give the final answer to the user. Call this once, when you are done.

    Args:
        answer: the final answer.
    """
    return ToolResult(observation=answer, ends_chain=True, final_answer=answer)
