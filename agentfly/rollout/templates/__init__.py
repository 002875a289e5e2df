"""Chat templates: render prompts, name the stop strings, join turns token-exactly.

``get_template("qwen2.5")`` for a named template, ``get_template(None, tokenizer)`` for the
model's own one. Importing this package registers every built-in template.
"""

from agentfly.rollout.templates import (  # noqa: F401  (registers the templates)
    action,
    agentfly_registry,
    library,
    qwen,
)
from agentfly.rollout.templates.base import ChatTemplate, TemplateNotPrefixPreservingError
from agentfly.rollout.templates.format import FormatTemplate
from agentfly.rollout.templates.model import ModelTemplate
from agentfly.rollout.templates.registry import TEMPLATES, get_template, register_template

__all__ = [
    "TEMPLATES",
    "ChatTemplate",
    "FormatTemplate",
    "ModelTemplate",
    "TemplateNotPrefixPreservingError",
    "get_template",
    "register_template",
]
