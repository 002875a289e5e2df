"""The chat-template interface the agent loop talks to.

A template turns chat messages (and tool schemas) into the text the engine continues, says which
strings end an assistant turn, and produces the *text between turns*: the text to append after an assistant turn
the engine sampled — the close of that turn when the sampled tokens did not include it, the
observation turn(s), and the next assistant generation prompt.

The text between turns is tokenized on its own and appended to the token sequence (nothing sampled is decoded
and re-encoded), so every template must be *prefix-preserving*: rendering a conversation with one
more turn only appends text. :meth:`ChatTemplate.between_turns` computes it as the difference of two
renders and refuses a template that rewrites earlier turns (e.g. one that strips earlier
reasoning), raising :class:`TemplateNotPrefixPreservingError`.

Messages are dicts ``{"role": "system"|"user"|"assistant"|"tool", "content": str}``. An assistant
message holds the text the model produced *without* the end-of-turn marker; whether the sampled
tokens included the marker is passed separately (``closed``), see :meth:`ChatTemplate.split_turn`.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

from agentfly.core.errors import InputError

Message = Mapping[str, Any]


class TemplateNotPrefixPreservingError(InputError):
    """The template renders earlier turns differently once a turn is added."""


def tool_schema(tool: Any) -> Mapping[str, Any]:
    """The JSON schema of a tool: a mapping as is, or an object's ``schema`` attribute."""
    if isinstance(tool, Mapping):
        return tool
    schema = getattr(tool, "schema", None)
    if callable(schema):
        schema = schema()
    if isinstance(schema, Mapping):
        return schema
    raise TypeError(f"cannot get a JSON schema from tool {tool!r}")


def format_tools_json_lines(tools: Sequence[Any]) -> str:
    """One JSON object per line, as Qwen's ``tool | tojson`` writes them."""
    return "\n".join(json.dumps(tool_schema(t), ensure_ascii=False) for t in tools)


def last_assistant_index(messages: Sequence[Message]) -> int:
    """Index of the last assistant message; raises if there is none."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i]["role"] == "assistant":
            return i
    raise ValueError("between_turns needs a conversation that contains an assistant message")


class ChatTemplate(ABC):
    """Renders conversations for one chat format.

    Subclasses implement :meth:`render` and :attr:`end_of_turn`; :meth:`between_turns` works for any
    prefix-preserving render and may be overridden with a direct construction.
    """

    name: str

    @property
    @abstractmethod
    def end_of_turn(self) -> str:
        """The marker the template writes right after an assistant message (``<|im_end|>``)."""

    @property
    def stop(self) -> list[str]:
        """Strings that end an assistant turn; pass them to the engine as stop strings."""
        return [self.end_of_turn]

    def stop_token_ids(self, tokenizer: Any) -> list[int]:
        """Ids of the stop strings that are single tokens of ``tokenizer``."""
        ids = []
        for s in self.stop:
            tid = tokenizer.convert_tokens_to_ids(s)
            if isinstance(tid, int) and tid != tokenizer.unk_token_id:
                ids.append(tid)
        return ids

    @abstractmethod
    def render(
        self,
        messages: Sequence[Message],
        tools: Sequence[Any] | None = None,
        add_generation_prompt: bool = False,
    ) -> str:
        """The whole conversation as text.

        Args:
            messages: chat messages; assistant content without the end-of-turn marker.
            tools: tool JSON schemas (or objects with a ``schema``); how and whether they are
                shown depends on the template.
            add_generation_prompt: end with the prefix of a new assistant turn.
        """

    def prompt(self, messages: Sequence[Message], tools: Sequence[Any] | None = None) -> str:
        """The initial prompt: ``messages`` rendered, ending with the generation prompt."""
        return self.render(messages, tools, add_generation_prompt=True)

    def split_turn(self, sampled_text: str) -> tuple[str, bool]:
        """Split the decoded sampled text of a turn into (message content, closed).

        ``closed`` is True when the text ends with the end-of-turn marker (the engine sampled it);
        the content is the text without it.
        """
        if sampled_text.endswith(self.end_of_turn):
            return sampled_text[: -len(self.end_of_turn)], True
        return sampled_text, False

    def between_turns(
        self,
        messages: Sequence[Message],
        tools: Sequence[Any] | None = None,
        *,
        closed: bool = True,
    ) -> str:
        """Text to append after the last assistant turn, up to the next generation prompt.

        Args:
            messages: the conversation so far: everything up to and including the last assistant
                message, then the messages that answer it (tool observations, user turns).
            tools: the tools given to :meth:`prompt`.
            closed: whether the sampled tokens of the last assistant turn already included
                :attr:`end_of_turn` (from :meth:`split_turn`).

        Raises:
            TemplateNotPrefixPreservingError: the template does not render the longer
                conversation as an extension of the shorter one.
        """
        last = last_assistant_index(messages)
        head = self.render(messages[:last], tools, add_generation_prompt=True)
        head += messages[last]["content"] + (self.end_of_turn if closed else "")
        full = self.render(messages, tools, add_generation_prompt=True)
        if not full.startswith(head):
            at = next(
                (i for i, (a, b) in enumerate(zip(head, full, strict=False)) if a != b),
                min(len(head), len(full)),
            )
            raise TemplateNotPrefixPreservingError(
                f"chat template {self.name!r} is not prefix-preserving: adding a turn changes "
                f"the earlier text at character {at} (had {head[at - 20 : at + 40]!r}, now "
                f"{full[at - 20 : at + 40]!r}). Token-exact multi-turn rollouts need a template "
                "that only appends; pick a named template (e.g. 'qwen2.5') instead."
            )
        return full[len(head) :]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"
