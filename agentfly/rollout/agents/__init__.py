"""Agent types by name: ``hf`` (hermes tool calls), ``react``, ``code``, ``action``."""

from agentfly.rollout.agents import action, code, hermes, react  # noqa: F401  (registers them)
from agentfly.rollout.agents.base import (
    AGENTS,
    Agent,
    ParsedTurn,
    ToolCallRequest,
    get_agent,
    register_agent,
)

__all__ = ["AGENTS", "Agent", "ParsedTurn", "ToolCallRequest", "get_agent", "register_agent"]
