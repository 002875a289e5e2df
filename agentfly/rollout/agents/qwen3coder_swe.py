"""The ``qwen3coder_swe`` agent (AgentFly's ``Qwen3CoderSWEAgent``): Qwen3-Coder's XML tool calls
(the ``qwen3_coder`` parser, :mod:`agentfly.rollout.agents.qwen3_coder`) of the file and shell
tools in the chain's workspace.

The tools' schemas go to the chat template (``qwen-xml-think`` writes them in its system turn);
results come back as ``tool`` messages. A turn without a tool call ends the chain (AgentFly's
``terminal`` status); so does every turn of an agent given no tools. The default system prompt
is AgentFly's ``Qwen3CoderToolPrompt``.

A ``tool_parser_name`` other than ``qwen3_coder`` replaces the parser, as in AgentFly, whose
agent builds the parser its script names.

Departure from AgentFly: its ``summarize`` pseudo-tool, injected after ``context_trigger_turns``
turns when the ``CONTEXT_TRIGGER_TURNS`` environment variable sets them (off by default), is
not built.
"""

from __future__ import annotations

from agentfly.rollout.agents.base import ParsedTurn, register_agent
from agentfly.rollout.agents.qwen3_coder import Qwen3CoderParser
from agentfly.rollout.agents.swe_prompts import QWEN3CODER_SYSTEM_PROMPT


@register_agent("qwen3coder_swe")
class Qwen3CoderSWEAgent(Qwen3CoderParser):
    def default_system_prompt(self) -> str:
        return QWEN3CODER_SYSTEM_PROMPT

    def parse(self, text: str) -> ParsedTurn:
        return super().parse(text) if self.tools else ParsedTurn()
