"""The ``code`` agent: a fenced ```python block in a turn runs in the code interpreter.

The last python block of a turn is executed in the chain's persistent interpreter session; its
output comes back as a ``tool`` message. A turn without a code block ends the chain, and its text
is the final response.
"""

from __future__ import annotations

import re

from agentfly.rollout.agents.base import Agent, ParsedTurn, ToolCallRequest, register_agent

CODE_BLOCK = re.compile(r"```(?:python|py)\s*\n(.*?)```", re.DOTALL)


@register_agent("code")
class CodeAgent(Agent):
    def default_system_prompt(self) -> str:
        return (
            "Solve the task step by step. To run Python, write a fenced block:\n"
            "```python\n# code\n```\nand its output will be shown to you. State must persist "
            "between blocks. When you are done, give the final answer without a code block."
        )

    @property
    def interpreter(self) -> str:
        for t in self.tools:
            if t.name in ("code_interpreter", "python_executor"):
                return t.name
        return self.tools[0].name if self.tools else "code_interpreter"

    def parse(self, text: str) -> ParsedTurn:
        blocks = CODE_BLOCK.findall(text)
        if not blocks:
            return ParsedTurn()
        return ParsedTurn(calls=[ToolCallRequest(self.interpreter, {"code": blocks[-1]})])

    def write_calls(self, calls: list[ToolCallRequest]) -> str:
        """Each call's ``code`` argument as a fenced python block (the parser runs the last)."""
        blocks = []
        for c in calls:
            code = c.arguments.get("code") if isinstance(c.arguments, dict) else None
            if not isinstance(code, str):
                raise ValueError(f"a call of {c.name!r} without a 'code' argument has no code block to write")
            blocks.append(f"```python\n{code}\n```")
        return "\n".join(blocks)
