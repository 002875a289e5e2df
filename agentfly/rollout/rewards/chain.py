"""What rewards read from a chain: its messages, its tool calls, the answer a tool call gave.

A reward's ``trajectory`` argument is agentfly's :class:`Trajectory` or, as AgentFly passes it,
the chain's list of message dicts (``role``; ``content`` a string or a list of ``{"text": ...}``
parts; an assistant's ``tool_calls`` in the OpenAI shape). Both read alike here.

The tool calls of a Trajectory are its recorded calls, the one that ended the chain (``answer``)
included, as AgentFly's list holds a ``tool`` message for the answer tool too; a Trajectory
built from messages alone (no recorded calls) is counted by its ``tool`` messages.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from typing import TypeAlias

    from agentfly.core.trajectory import ToolCallRecord, Trajectory

    Chain: TypeAlias = Trajectory | Sequence[Mapping[str, Any]] | None


def messages_of(trajectory: Chain) -> list[Mapping]:
    """The chain's messages (dicts only), whichever shape ``trajectory`` has."""
    if trajectory is None:
        return []
    messages = trajectory if isinstance(trajectory, Sequence) else trajectory.messages
    return [m for m in messages if isinstance(m, Mapping)]


def _recorded_calls(trajectory: Chain) -> list[ToolCallRecord]:
    """A Trajectory's recorded tool calls; none for a messages list."""
    if trajectory is None or isinstance(trajectory, Sequence):
        return []
    return trajectory.tool_calls


def text_of(content: Any) -> str:
    """A message's content as text: a string as is, a list of parts as their texts, one a line."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        parts = ((p.get("text") or "") if isinstance(p, Mapping) else str(p) for p in content)
        return "\n".join(part for part in parts if part)
    return str(content)


def assistant_texts(trajectory: Chain) -> list[str]:
    """The text of every assistant turn, in order."""
    return [
        text_of(m.get("content")) for m in messages_of(trajectory) if m.get("role") == "assistant"
    ]


def tool_call_count(trajectory: Chain) -> int:
    """How many tool calls the chain made (see the module docstring for what counts)."""
    tool_messages = sum(1 for m in messages_of(trajectory) if m.get("role") == "tool")
    return max(len(_recorded_calls(trajectory)), tool_messages)


def used_tool(trajectory: Chain) -> bool:
    """Whether the chain called any tool."""
    return tool_call_count(trajectory) > 0


def tool_call_answer(trajectory: Chain) -> str | None:
    """The answer the chain's last turn gave through a tool call, or None.

    A Trajectory with recorded calls: the ``answer`` argument of the last call, when the last
    turn made it. Otherwise AgentFly's rule on the messages: the ``answer`` argument of the first
    tool call of a last assistant message, or the text of a last ``tool`` message (the answer
    tool's observation).
    """
    recorded = _recorded_calls(trajectory)
    if recorded:
        last = recorded[-1]
        return answer_argument(last.arguments) if last.turn == trajectory.num_turns - 1 else None
    messages = messages_of(trajectory)
    if not messages:
        return None
    last = messages[-1]
    if last.get("role") == "tool":
        return text_of(last.get("content"))
    calls = last.get("tool_calls") or []
    if last.get("role") != "assistant" or not calls:
        return None
    first = calls[0]
    return answer_argument(first.get("function", first).get("arguments"))


def answer_argument(arguments: Any) -> str | None:
    """A tool call's ``answer`` argument (its arguments a dict or a JSON string), or None.

    Arguments that are not JSON but mention "answer" are the answer as a whole (AgentFly's rule;
    AgentFly also takes JSON-string arguments whole, which then never match a gold answer).
    """
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except json.JSONDecodeError:
            return arguments if "answer" in arguments else None
        arguments = parsed
    if isinstance(arguments, Mapping) and "answer" in arguments:
        return str(arguments["answer"])
    return None
