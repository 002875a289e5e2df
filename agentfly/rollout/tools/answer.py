"""The answer tools: the model's final response; calling one ends the chain.

``answer_math`` and ``answer_qa`` are AgentFly's (``tools/src/react/tools.py``): the same tool
as ``answer`` under the names and descriptions its math and QA training scripts show the model.
"""

from __future__ import annotations

from agentfly.rollout.tools.base import ToolResult, tool


def final_answer(answer: str) -> ToolResult:
    """The result that ends the chain with ``answer`` as its final response."""
    text = str(answer)
    return ToolResult(observation=text, ends_chain=True, final_answer=text)


@tool(name="answer", runs_in="thread")  # builds a ToolResult: nothing to contain
def answer(answer: str) -> ToolResult:
    """Give the final answer to the user. Call this once, when you are done.

    Args:
        answer: the final answer.
    """
    return final_answer(answer)


@tool(name="answer_math", runs_in="thread")
def answer_math(answer: str) -> ToolResult:
    """Give the final answer. The answer should be put inside the \\boxed{} tag.

    Args:
        answer: the final answer to the question.
    """
    return final_answer(answer)


@tool(name="answer_qa", runs_in="thread")
def answer_qa(answer: str) -> ToolResult:
    """Give the final answer. The answer should be simple, short, and direct.

    Args:
        answer: the final answer to the question.
    """
    return final_answer(answer)
