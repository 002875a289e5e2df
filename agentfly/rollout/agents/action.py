"""The ``action`` agent: ``<action>...</action>`` against an environment tool.

The content of the last ``<action>`` tag is passed to the agent's first tool (the environment,
e.g. ``webshop_browser_action``) as its only required argument. A turn with no action ends the
chain; its text is the final response.
"""

from __future__ import annotations

import re

from agentfly.rollout.agents.base import Agent, ParsedTurn, ToolCallRequest, register_agent

ACTION_TAG = re.compile(r"<action>(.*?)</action>", re.DOTALL)


@register_agent("action")
class ActionAgent(Agent):
    def parse(self, text: str) -> ParsedTurn:
        actions = ACTION_TAG.findall(text)
        if not actions or not self.tools:
            return ParsedTurn()
        env = self.tools[0].name
        return ParsedTurn(
            calls=[ToolCallRequest(env, self.single_argument(env, actions[-1].strip()))]
        )

    def write_calls(self, calls: list[ToolCallRequest]) -> str:
        """Each call's one argument inside ``<action>`` tags (the parser takes the last)."""
        tags = []
        for c in calls:
            args = c.arguments
            if isinstance(args, dict):
                if len(args) != 1:
                    raise ValueError(f"an <action> holds one argument; the call of {c.name!r} has {len(args)}")
                (args,) = args.values()
            tags.append(f"<action>{args}</action>")
        return "\n".join(tags)
