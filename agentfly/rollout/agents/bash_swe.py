"""The ``bash_swe`` agent (AgentFly's ``BashSWEAgent``, mini-SWE-agent's format): every turn runs
one bash command, written in a fenced block, in the chain's workspace.

A turn is read as AgentFly reads it: only the text up to the end of its first
```` ```mswea_bash_command ```` or ```` ```bash ```` block (either tag, any case) counts, and
that block's stripped text is the command, a call of ``run_shell_command`` with ``{"cmd": ...}``
(when the agent has that tool, or no tools at all). A command holding
``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` (the system prompt's ``echo
COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``) submits: the chain ends with that text as its final
answer and the command is not run. A turn without a block, or with an empty one, ends the chain
without an answer.

The type always reads turns with its own parser, as AgentFly's does: its training script names
``tool_parser_name=hermes``, which ``BashSWEAgent`` never consults.

Departure from AgentFly: the text sampled after the first block stays in the trajectory (it was
sampled; AgentFly cuts it from the message it keeps).
"""

from __future__ import annotations

import re

from agentfly.rollout.agents.base import (
    Agent,
    ParsedTurn,
    ToolCallRequest,
    register_agent,
    single_call_argument,
)
from agentfly.rollout.agents.swe_prompts import BASH_SYSTEM_PROMPT, SUBMIT_MARKER

BASH_BLOCK = re.compile(r"```(?:mswea_bash_command|bash)\s*(.*?)```", re.DOTALL | re.IGNORECASE)
SHELL_TOOL = "run_shell_command"


@register_agent("bash_swe")
class BashSWEAgent(Agent):
    keeps_own_parser = True

    def default_system_prompt(self) -> str:
        return BASH_SYSTEM_PROMPT

    def parse(self, text: str) -> ParsedTurn:
        block = BASH_BLOCK.search(text)
        command = block.group(1).strip() if block else ""
        if not command:
            return ParsedTurn()
        if SUBMIT_MARKER in command:
            return ParsedTurn(answer=text[: block.end()])
        if self.tools and SHELL_TOOL not in self.tool_names:
            return ParsedTurn()
        return ParsedTurn(calls=[ToolCallRequest(SHELL_TOOL, {"cmd": command})])

    def write_calls(self, calls: list[ToolCallRequest]) -> str:
        """One ``run_shell_command`` call as a ```` ```mswea_bash_command ```` block.

        Raises:
            ValueError: several calls, another tool, or arguments other than ``cmd``.
        """
        command = single_call_argument(calls, "bash_swe", SHELL_TOOL, "cmd", "command")
        return f"```mswea_bash_command\n{command}\n```"
