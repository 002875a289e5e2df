"""The ``hermes`` agent (AgentFly's ``hf``): tool calls as hermes ``<tool_call>{"name": ..., "arguments": ...}</tool_call>``.

The tools' JSON schemas go to the chat template (Qwen2.5 and other hermes-style templates show
them in the system message); results come back as ``tool`` messages.
"""

from __future__ import annotations

import contextlib
import json
import re

from agentfly.rollout.agents.base import Agent, ParsedTurn, ToolCallRequest, register_agent

TOOL_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)


@register_agent("hermes", aliases=("hf",))
class HermesAgent(Agent):
    tools_in_template = True

    def parse(self, text: str) -> ParsedTurn:
        calls = []
        for body in TOOL_CALL.findall(text):
            body = body.strip()
            if not body:
                continue
            try:
                obj = json.loads(body)
            except json.JSONDecodeError as e:
                calls.append(
                    ToolCallRequest("", body, error=f"the tool call is not valid JSON ({e.msg})")
                )
                continue
            if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
                calls.append(
                    ToolCallRequest(
                        "", body, error='a tool call needs {"name": ..., "arguments": {...}}'
                    )
                )
                continue
            args = obj.get("arguments", obj.get("parameters", {}))
            if isinstance(args, str):  # some models double-encode the arguments
                with contextlib.suppress(json.JSONDecodeError):
                    args = json.loads(args)
            calls.append(
                ToolCallRequest(obj["name"], args if isinstance(args, dict | str) else str(args))
            )
        return ParsedTurn(calls=calls)

    def write_calls(self, calls: list[ToolCallRequest]) -> str:
        """Each call as Qwen2.5's chat template writes it: ``<tool_call>``, the JSON object, ``</tool_call>``."""
        return "\n".join(
            "<tool_call>\n" + json.dumps({"name": c.name, "arguments": c.arguments}) + "\n</tool_call>"
            for c in calls
        )
