"""The ``react`` agent (Yao et al., 2023, https://arxiv.org/abs/2210.03629).

Turns look like ``Thought: ...`` / ``Action: tool_name`` / ``Input: {...}`` (``Action Input:`` is
accepted too); the observation comes back as ``Observation: ...``. ``Final Answer: ...`` ends the
chain with that answer. The tools are described in the agent's own system prompt, not by the
template.
"""

from __future__ import annotations

import json
import re
from typing import Any

from agentfly.rollout.agents.base import Agent, ParsedTurn, ToolCallRequest, register_agent

ACTION = re.compile(r"Action\s*:\s*(.+?)\s*(?:\n|$)")
INPUT = re.compile(r"(?:Action\s+)?Input\s*:\s*(.*)", re.DOTALL)
FINAL = re.compile(r"Final Answer\s*:\s*(.*)", re.DOTALL)


@register_agent("react")
class ReactAgent(Agent):
    def default_system_prompt(self) -> str:
        lines = [
            f"- {t.name}: {t.description} Arguments: {json.dumps(t.parameters)}" for t in self.tools
        ]
        return (
            "Answer the question by reasoning and using tools. Available tools:\n"
            + "\n".join(lines)
            + "\n\nUse this format:\nThought: your reasoning\nAction: the tool name\n"
            "Input: the tool's arguments as a JSON object\n\n"
            "After an observation, continue with a new Thought. When you know the answer, write\n"
            "Final Answer: the answer"
        )

    def parse(self, text: str) -> ParsedTurn:
        action = ACTION.search(text)
        if action is None:
            final = FINAL.search(text)
            return ParsedTurn(answer=final.group(1).strip() if final else None)
        name = action.group(1).strip().strip("`")
        tail = text[action.end() :]
        match = INPUT.search(tail)
        raw = match.group(1).strip() if match else ""
        raw = raw.split("\nObservation", 1)[0].strip()
        args: dict[str, Any] | str
        try:
            parsed = json.loads(raw) if raw else {}
            args = parsed if isinstance(parsed, dict) else self.single_argument(name, str(parsed))
        except json.JSONDecodeError:
            args = self.single_argument(name, raw.strip('"'))
        return ParsedTurn(calls=[ToolCallRequest(name, args)])

    def write_calls(self, calls: list[ToolCallRequest]) -> str:
        """``Action: name`` and ``Input: {...}`` (the parser reads one action per turn)."""
        return "\n".join(f"Action: {c.name}\nInput: {json.dumps(c.arguments)}" for c in calls)

    def observation_messages(self, calls, observations):
        return [{"role": "user", "content": f"Observation: {obs}"} for obs in observations]
