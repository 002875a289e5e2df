"""The ``action`` agent (AgentFly's): ``<action>...</action>`` against an environment tool.

A turn is read as AgentFly's ``ActionAgent`` reads it: the text up to the first ``</action>``
or ``</summarize>`` (either case) counts, the rest is ignored; in it, the first
``<action>BODY</action>`` becomes a call of the agent's first tool (the environment, e.g.
``webshop_browser_action``) with BODY as its one required argument, and a
``<summarize>BODY</summarize>`` a call of the ``summarize`` tool; tags with empty bodies are
skipped. A body that reads ``end task`` (either tag) ends the chain, as does a turn with no
tag; its text is the final response. ``<think>...</think>`` is free reasoning.

Departures from AgentFly: the text sampled after the first closing tag stays in the trajectory
(it was sampled; AgentFly cuts it from the message it trains on), and there is no
``context_trigger_turns`` prompt asking for a ``<summarize>`` (which folds the chain's history,
:mod:`agentfly.rollout.folding`).
"""

from __future__ import annotations

import re

from agentfly.rollout.agents.base import Agent, ParsedTurn, ToolCallRequest, register_agent

TAG = re.compile(r"<(action|summarize)>\s*(.*?)\s*</\1>", re.DOTALL | re.IGNORECASE)
FIRST_CLOSE = re.compile(r"</(action|summarize)>", re.IGNORECASE)
END_TASK = "end task"
SUMMARIZE_TOOL = "summarize"


@register_agent("action")
class ActionAgent(Agent):
    def parse(self, text: str) -> ParsedTurn:
        close = FIRST_CLOSE.search(text)
        read = text[: close.end()] if close else text
        for match in TAG.finditer(read):
            tag, body = match.group(1).lower(), match.group(2).strip()
            if not body:
                continue
            if body.lower() == END_TASK:
                return ParsedTurn(answer=text)
            if tag == "summarize":
                return ParsedTurn(calls=[ToolCallRequest(SUMMARIZE_TOOL, {"summary": body})])
            if not self.tools:
                return ParsedTurn()
            env = self.tools[0].name
            return ParsedTurn(calls=[ToolCallRequest(env, self.single_argument(env, body))])
        return ParsedTurn()

    def write_calls(self, calls: list[ToolCallRequest]) -> str:
        """One call as its tag (``<summarize>`` for ``summarize``, else ``<action>``): the parser
        reads a turn's first tag alone, as AgentFly's does.

        Raises:
            ValueError: several calls, or a call with other than one argument.
        """
        if len(calls) != 1:
            raise ValueError(f"an action turn holds one call (the first tag is read); got {len(calls)}")
        (call,) = calls
        value = call.arguments
        if isinstance(value, dict):
            if len(value) != 1:
                raise ValueError(f"an <action> holds one argument; the call of {call.name!r} has {len(value)}")
            (value,) = value.values()
        tag = "summarize" if call.name == SUMMARIZE_TOOL else "action"
        return f"<{tag}>{value}</{tag}>"
