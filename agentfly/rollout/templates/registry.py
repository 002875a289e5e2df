"""The chat-template registry and :func:`get_template`."""

from __future__ import annotations

from typing import Any

from agentfly.core.registry import Registry
from agentfly.rollout.templates.base import ChatTemplate


def _as_template(obj: Any, spec: str) -> ChatTemplate:
    """A ``module:attr`` template: a ``ChatTemplate``, or a subclass built without arguments."""
    if isinstance(obj, type) and issubclass(obj, ChatTemplate):
        obj = obj()
    if isinstance(obj, ChatTemplate):
        return obj
    raise TypeError(f"expected a ChatTemplate instance, got {obj!r}")


TEMPLATES: Registry[ChatTemplate] = Registry("chat template", coerce=_as_template)

# Names that select the model's own chat template (``tokenizer.apply_chat_template``).
MODEL_TEMPLATE_NAMES = ("auto", "model")


def register_template(name: str, template: ChatTemplate) -> ChatTemplate:
    """Register ``template`` under ``name`` (refused if the name holds another template)."""
    TEMPLATES.register(name, template)
    return template


def get_template(name: str | ChatTemplate | None, tokenizer: Any = None) -> ChatTemplate:
    """The template called ``name``; the model's own one for None, ``"auto"`` or ``"model"``.

    Args:
        name: a registered name, a template (returned as is), or None/"auto"/"model".
        tokenizer: needed for the model's own template.

    Raises:
        UnknownNameError: no template has that name (the message lists the known ones).
        ValueError: the model's template was asked for without a tokenizer that has one.
    """
    if isinstance(name, ChatTemplate):
        return name
    if name is None or name in MODEL_TEMPLATE_NAMES:
        if tokenizer is None:
            raise ValueError("the model's own chat template needs a tokenizer")
        from agentfly.rollout.templates.model import ModelTemplate

        return ModelTemplate(tokenizer)
    return TEMPLATES.get(name)
