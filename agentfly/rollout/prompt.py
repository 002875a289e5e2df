"""A chain's first prompt: the one place it is rendered and tokenized.

The agent loop renders every chain's prompt with :func:`render_prompt`, and the check made when
the data is loaded (:mod:`agentfly.rollout.prompt_fit`) measures each row with
:func:`render_text`, so the length checked is the length the engine will be given.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentfly.core.images import ImageInput


@dataclass
class RenderedPrompt:
    """A chain's first prompt.

    Attributes:
        messages: the chat so far (the system prompt if any, the user's question).
        tools: the tools' schemas handed to the template (None: the agent describes its tools).
        ids: (P,) the rendered prompt's token ids, as the engine is given them.
        images: the images its placeholder runs stand for, in order (a vision row's).
    """

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    ids: list[int]
    images: list[ImageInput] = field(default_factory=list)


def render_text(
    agent: Any, template: Any, question: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None, str]:
    """``(messages, tools, text)``: the prompt asking ``question``, rendered by the template."""
    messages = agent.initial_messages(question)
    tools = agent.template_tools()
    return messages, tools, template.prompt(messages, tools)


def render_prompt(agent: Any, template: Any, tokenizer: Any, question: str) -> RenderedPrompt:
    """Render and tokenize the first prompt of a chain asking ``question``."""
    messages, tools, text = render_text(agent, template, question)
    return RenderedPrompt(messages, tools, list(tokenizer.encode(text, add_special_tokens=False)))
