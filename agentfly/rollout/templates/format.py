"""Templates written as format strings, one per turn kind (the named templates).

The text layout follows AgentFly's ``Template`` (system / user / assistant / observation pieces
concatenated in order), which is prefix-preserving by construction, so the text between turns is built directly
instead of by diffing renders.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agentfly.rollout.templates.base import (
    ChatTemplate,
    Message,
    format_tools_json_lines,
    last_assistant_index,
)


@dataclass(frozen=True, repr=False)
class FormatTemplate(ChatTemplate):
    """A chat format given as pieces of text with ``{placeholders}``.

    Args:
        name: registry name.
        system_template: a system turn; ``{system}`` is the system text.
        default_system: system text used when the conversation has no system message; None
            renders no system turn then.
        tools_template: appended to the system text when tools are given; ``{tools}`` is the
            formatted catalogue. None: the template does not show tools (the agent describes them
            itself, e.g. in its system prompt).
        user_template: a user turn; ``{content}``.
        generation_prompt: opens an assistant turn.
        end_of_turn: closes an assistant turn; the engine's stop string.
        turn_suffix: written after ``end_of_turn`` (not sampled by the model).
        observations_template: one turn holding consecutive tool messages; ``{observations}``.
        observation_template: one tool message inside it; ``{observation}``.
        observation_separator: between two tool messages of the same turn.
        format_tools: tool schemas to the ``{tools}`` text.
    """

    name: str
    system_template: str = "<|im_start|>system\n{system}<|im_end|>\n"
    default_system: str | None = None
    tools_template: str | None = None
    user_template: str = "<|im_start|>user\n{content}<|im_end|>\n"
    generation_prompt: str = "<|im_start|>assistant\n"
    end_of_turn_marker: str = "<|im_end|>"
    turn_suffix: str = "\n"
    observations_template: str = "<|im_start|>user{observations}<|im_end|>\n"
    observation_template: str = "\n<tool_response>\n{observation}\n</tool_response>"
    observation_separator: str = ""
    format_tools: Callable[[Sequence[Any]], str] = format_tools_json_lines

    @property
    def end_of_turn(self) -> str:
        return self.end_of_turn_marker

    def render(
        self,
        messages: Sequence[Message],
        tools: Sequence[Any] | None = None,
        add_generation_prompt: bool = False,
    ) -> str:
        parts = [self._system(messages, tools)]
        body = messages[1:] if messages and messages[0]["role"] == "system" else messages
        parts.append(self._turns(body))
        if add_generation_prompt:
            parts.append(self.generation_prompt)
        return "".join(parts)

    def between_turns(
        self,
        messages: Sequence[Message],
        tools: Sequence[Any] | None = None,
        *,
        closed: bool = True,
    ) -> str:
        last = last_assistant_index(messages)
        close = "" if closed else self.end_of_turn
        return close + self.turn_suffix + self._turns(messages[last + 1 :]) + self.generation_prompt

    def _system(self, messages: Sequence[Message], tools: Sequence[Any] | None) -> str:
        system = self.default_system
        if messages and messages[0]["role"] == "system":
            system = _text(messages[0]["content"])
        if tools and self.tools_template is not None:
            catalogue = self.tools_template.replace("{tools}", self.format_tools(tools))
            system = (system or "") + catalogue
        if system is None:
            return ""
        return self.system_template.replace("{system}", system)

    def _turns(self, messages: Sequence[Message]) -> str:
        """Every message but a leading system one; consecutive tool messages share a turn."""
        parts: list[str] = []
        pending: list[str] = []  # observations of the current tool turn
        for message in messages:
            role, content = message["role"], _text(message["content"])
            if role == "tool":
                pending.append(self.observation_template.replace("{observation}", content))
                continue
            if pending:
                parts.append(self._observations(pending))
                pending = []
            if role == "user":
                parts.append(self.user_template.replace("{content}", content))
            elif role == "assistant":
                parts.append(self.generation_prompt + content + self.end_of_turn + self.turn_suffix)
            elif role == "system":
                parts.append(self.system_template.replace("{system}", content))
            else:
                raise ValueError(f"unknown message role {role!r} (template {self.name!r})")
        if pending:
            parts.append(self._observations(pending))
        return "".join(parts)

    def _observations(self, observations: list[str]) -> str:
        joined = self.observation_separator.join(observations)
        return self.observations_template.replace("{observations}", joined)


def _text(content: Any) -> str:
    """Message content as text; a list of ``{"type": "text", "text": ...}`` parts is joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p["text"] for p in content if p.get("type") == "text")
    raise TypeError(f"unsupported message content {content!r}")
