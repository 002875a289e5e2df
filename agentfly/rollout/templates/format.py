"""Templates written as format strings, one per turn kind (the named templates).

The text layout follows AgentFly's ``Template`` (chat-bricks' ``Template``: an optional global
prefix, then system / user / assistant / observation pieces concatenated in order), which only
appends when a turn is added, so the text between turns is built directly instead of by diffing
renders.

Two departures from plain concatenation, both declared per template and reported by
:attr:`FormatTemplate.prefix_preserving`:

- ``assistant_prefix``: a finished assistant turn may open with less than the generation prompt
  (GLM-4.5's prompt ends ``<think></think>\\n``, a finished turn renders ``<think></think>{content}``).
- ``strip_earlier_thinking``: Qwen3 drops ``<think>...</think>`` from earlier assistant turns.

Either way the trajectory keeps the tokens the model sampled after the generation prompt; only a
re-render of the whole conversation differs from them.

Message content is a string or a list of parts: ``{"type": "text", "text": ...}`` and, for a
template with an ``image_placeholder`` (the vision templates), images ``{"type": "image", ...}`` or
``{"type": "image_url", ...}``, each written where it stands as one placeholder, in user and tool
messages (chat-bricks' rule). A text-only template refuses an image rather than drop it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agentfly.core.errors import InputError
from agentfly.rollout.templates.base import (
    ChatTemplate,
    Message,
    format_tools_json_lines,
    last_assistant_index,
)

_PLACEHOLDER = re.compile(r"\{(system|tools|content|observations|observation)\}")
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)

#: Content part types that hold an image (OpenAI's chat API sends ``image_url``).
IMAGE_PART_TYPES = ("image", "image_url")


@dataclass(frozen=True, repr=False)
class FormatTemplate(ChatTemplate):
    """A chat format given as pieces of text with ``{placeholders}``.

    Args:
        name: registry name.
        system_template: a system turn; ``{system}`` is the system text, an optional ``{tools}``
            receives the tool block (else the block is appended to the system text).
        default_system: system text used when the conversation has no system message; None
            renders no system turn then (unless tools are passed and the system turn shows them, as
            chat-bricks does).
        default_system_template: the system turn used for ``default_system`` (Kimi-K2 ends only
            that one with a newline); None uses ``system_template``.
        system_processor: rewrites the system text, given it and whether tools are passed
            (Llama-3.2's date header, Qwen3's blank line before the tools).
        tools_template: the tool block; ``{tools}`` is the formatted catalogue. None (and no
            ``system_template_with_tools``): the template does not show tools (the agent
            describes them itself, e.g. in its system prompt).
        system_template_with_tools: a whole system turn used instead when tools are passed;
            ``{system}`` and ``{tools}`` (the catalogue, not wrapped by ``tools_template``).
        user_template: a user turn; ``{content}``.
        user_template_with_tools: the first user turn when tools are passed; ``{content}`` and
            ``{tools}`` (the catalogue); Llama-3.2 puts the tools there.
        generation_prompt: opens an assistant turn for the model to continue.
        assistant_prefix: opens a finished assistant turn in :meth:`render`; None: the
            generation prompt. Set when the generation prompt ends with text the template does
            not re-render (the template is then not prefix-preserving).
        end_of_turn_marker: closes an assistant turn; the engine's stop string. Empty for
            templates whose turns end with the next turn's role marker (GLM): that marker, when
            sampled, is not written again by :meth:`between_turns`.
        turn_suffix: written after ``end_of_turn`` (not sampled by the model).
        stop_words: the engine's stop strings when they are not just ``end_of_turn_marker``.
        observations_template: one turn holding consecutive tool messages; ``{observations}``.
        observation_template: one tool message inside it; ``{observation}``.
        observation_separator: between two tool messages of the same turn.
        format_tools: tool schemas to the ``{tools}`` text.
        prefix: written before everything (a BOS the template spells out, ``[gMASK]<sop>``).
        system_turn_for_tools: with tools passed and no system text, render an empty system turn
            even when it does not show the tools (chat-bricks' rule; the library's templates).
        strip_earlier_thinking: :meth:`render` drops ``<think>...</think>`` from every assistant
            turn but a final one (Qwen3).
        image_placeholder: the text of one image part of a user or tool message (Qwen-VL's
            ``<|vision_start|><|image_pad|><|vision_end|>``: one pad, which the caller widens to
            the image's token count); None: the template is text-only and refuses images.
    """

    name: str
    system_template: str = "<|im_start|>system\n{system}<|im_end|>\n"
    default_system: str | None = None
    default_system_template: str | None = None
    system_processor: Callable[[str, bool], str] | None = None
    tools_template: str | None = None
    system_template_with_tools: str | None = None
    user_template: str = "<|im_start|>user\n{content}<|im_end|>\n"
    user_template_with_tools: str | None = None
    generation_prompt: str = "<|im_start|>assistant\n"
    assistant_prefix: str | None = None
    end_of_turn_marker: str = "<|im_end|>"
    turn_suffix: str = "\n"
    stop_words: tuple[str, ...] = ()
    observations_template: str = "<|im_start|>user{observations}<|im_end|>\n"
    observation_template: str = "\n<tool_response>\n{observation}\n</tool_response>"
    observation_separator: str = ""
    format_tools: Callable[[Sequence[Any]], str] = format_tools_json_lines
    prefix: str = ""
    strip_earlier_thinking: bool = False
    system_turn_for_tools: bool = False
    image_placeholder: str | None = None

    @property
    def end_of_turn(self) -> str:
        return self.end_of_turn_marker

    @property
    def stop(self) -> list[str]:
        return list(self.stop_words) if self.stop_words else [self.end_of_turn]

    @property
    def prefix_preserving(self) -> bool:
        """Whether rendering one more turn only appends text (:meth:`render` of a whole
        conversation equals the prompt, the sampled turns and the texts between turns)."""
        opener = self.generation_prompt if self.assistant_prefix is None else self.assistant_prefix
        return opener == self.generation_prompt and not self.strip_earlier_thinking

    def split_turn(self, sampled_text: str) -> tuple[str, bool]:
        for stop in sorted({self.end_of_turn, *self.stop_words} - {""}, key=len, reverse=True):
            if sampled_text.endswith(stop):
                return sampled_text[: -len(stop)], True
        return sampled_text, False

    def render(
        self,
        messages: Sequence[Message],
        tools: Sequence[Any] | None = None,
        add_generation_prompt: bool = False,
    ) -> str:
        parts = [self.prefix, self._system(messages, tools)]
        body = messages[1:] if messages and messages[0]["role"] == "system" else messages
        first_user_tools = None
        if tools and self.user_template_with_tools is not None:
            first_user_tools = self.format_tools(tools)
        parts.append(self._turns(body, first_user_tools, final=not add_generation_prompt))
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
        after = self._turns(messages[last + 1 :]) + self.generation_prompt
        if closed and not self.end_of_turn:  # the sampled stop string opens the next turn
            after = next((after[len(s) :] for s in self.stop if after.startswith(s)), after)
        return close + self.turn_suffix + after

    def _system(self, messages: Sequence[Message], tools: Sequence[Any] | None) -> str:
        given = bool(messages) and messages[0]["role"] == "system"
        system = self._text(messages[0]["content"], "system") if given else self.default_system
        if system is None:
            shows_tools = self.system_turn_for_tools or (
                self.tools_template is not None
                or self.system_template_with_tools is not None
                or "{tools}" in self.system_template
            )
            if not (tools and shows_tools):
                return ""
            system = ""
        if self.system_processor is not None:
            system = self.system_processor(system, bool(tools))
        catalogue = self.format_tools(tools) if tools else ""
        if tools and self.system_template_with_tools is not None:
            return _fill(self.system_template_with_tools, system=system, tools=catalogue)
        block = _fill(self.tools_template, tools=catalogue) if tools and self.tools_template else ""
        template = self.system_template
        if not given and self.default_system_template is not None:
            template = self.default_system_template
        if "{tools}" not in template:
            system, block = system + block, ""
        return _fill(template, system=system, tools=block)

    def _turns(
        self,
        messages: Sequence[Message],
        first_user_tools: str | None = None,
        final: bool = False,
    ) -> str:
        """Every message but a leading system one; consecutive tool messages share a turn.

        Args:
            first_user_tools: the catalogue for ``user_template_with_tools`` (first user turn).
            final: the last message ends the conversation (no generation prompt follows).
        """
        opener = self.generation_prompt if self.assistant_prefix is None else self.assistant_prefix
        parts: list[str] = []
        pending: list[str] = []  # observations of the current tool turn
        for i, message in enumerate(messages):
            role = message["role"]
            content = self._text(message["content"], role)
            if role == "tool":
                pending.append(_fill(self.observation_template, observation=content))
                continue
            if pending:
                parts.append(self._observations(pending))
                pending = []
            if role == "user" and first_user_tools is not None:
                parts.append(
                    _fill(self.user_template_with_tools, content=content, tools=first_user_tools)
                )
                first_user_tools = None
            elif role == "user":
                parts.append(_fill(self.user_template, content=content))
            elif role == "assistant":
                if self.strip_earlier_thinking and not (final and i == len(messages) - 1):
                    content = _THINK.sub("", content)
                parts.append(opener + content + self.end_of_turn + self.turn_suffix)
            elif role == "system":
                parts.append(_fill(self.system_template, system=content, tools=""))
            else:
                raise ValueError(f"unknown message role {role!r} (template {self.name!r})")
        if pending:
            parts.append(self._observations(pending))
        return "".join(parts)

    def _text(self, content: Any, role: str) -> str:
        """Message content as text: a string as is; a list of parts joined in order, each image
        part written as :attr:`image_placeholder`.

        Raises:
            InputError: an image for a text-only template, or in a system or assistant message
                (no Qwen-VL template renders those); a part of another type.
        """
        if isinstance(content, str):
            return content
        if not isinstance(content, list):
            raise TypeError(f"unsupported message content {content!r}")
        parts: list[str] = []
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text":
                parts.append(part["text"])
            elif kind in IMAGE_PART_TYPES:
                if self.image_placeholder is None:
                    raise InputError(
                        f"template {self.name!r} is text-only and cannot show the image in a "
                        f"{role} message; name a vision template (e.g. 'qwen2.5-vl')"
                    )
                if role not in ("user", "tool"):
                    raise InputError(
                        f"template {self.name!r} shows images in user and tool messages only, "
                        f"not in a {role} message"
                    )
                parts.append(self.image_placeholder)
            else:
                what = "text and image" if self.image_placeholder is not None else "text"
                raise InputError(
                    f"template {self.name!r} cannot render a content part of type {kind!r} in a "
                    f"{role} message: it renders {what} parts ({{'type': 'text', 'text': ...}})"
                )
        return "".join(parts)

    def _observations(self, observations: list[str]) -> str:
        joined = self.observation_separator.join(observations)
        return _fill(self.observations_template, observations=joined)


def _fill(template: str, **values: str) -> str:
    """``template`` with each ``{name}`` of ``values`` replaced in one pass (a value is never
    scanned for placeholders, so content holding ``{content}`` stays as it is)."""
    return _PLACEHOLDER.sub(lambda m: values.get(m[1], m[0]), template)

