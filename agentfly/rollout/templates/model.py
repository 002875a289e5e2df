"""The model's own chat template (``tokenizer.apply_chat_template``), used when no template is
named.

Its text between turns is the difference between two renders, so a template that rewrites earlier turns (Qwen3
strips the reasoning of earlier assistant turns; some templates ``strip()`` content) is refused
with :class:`~agentfly.rollout.templates.base.TemplateNotPrefixPreservingError` the first time a
text between turns is asked for.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentfly.rollout.templates.base import ChatTemplate, Message, tool_schema

_PROBE = "\x00agentfly-probe\x00"


class ModelTemplate(ChatTemplate):
    """Wraps a Hugging Face tokenizer's ``chat_template``.

    Args:
        tokenizer: a tokenizer with a ``chat_template``.
        name: shown in errors and reprs.

    Raises:
        ValueError: the tokenizer has no chat template.
    """

    def __init__(self, tokenizer: Any, name: str = "model") -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError(
                "the tokenizer has no chat_template; name a template instead "
                "(e.g. template='qwen2.5')"
            )
        self.tokenizer = tokenizer
        self.name = name
        self._end_of_turn = self._find_end_of_turn()

    @property
    def end_of_turn(self) -> str:
        return self._end_of_turn

    def render(
        self,
        messages: Sequence[Message],
        tools: Sequence[Any] | None = None,
        add_generation_prompt: bool = False,
    ) -> str:
        schemas = [dict(tool_schema(t)) for t in tools] if tools else None
        return self.tokenizer.apply_chat_template(
            [dict(m) for m in messages],
            tools=schemas,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
        )

    def _find_end_of_turn(self) -> str:
        """The special token the template writes right after an assistant message's content.

        Falls back to the tokenizer's EOS token when the template writes none there.
        """
        text = self.render(
            [{"role": "user", "content": "hi"}, {"role": "assistant", "content": _PROBE}]
        )
        at = text.rfind(_PROBE)
        after = text[at + len(_PROBE) :] if at >= 0 else ""
        specials = sorted(
            {*self.tokenizer.all_special_tokens, *self.tokenizer.get_added_vocab()},
            key=len,
            reverse=True,
        )
        for token in specials:
            if token and after.startswith(token):
                return token
        if self.tokenizer.eos_token:
            return self.tokenizer.eos_token
        raise ValueError("cannot tell how the chat template ends an assistant turn")
