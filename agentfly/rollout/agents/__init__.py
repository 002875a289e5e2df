"""Agent types by name: ``hermes`` (hermes tool calls; AgentFly's ``hf``), ``react``, ``code``,
``action``, ``searchr1`` (Search-R1's ``<search>``/``<answer>`` tags)."""

from agentfly.rollout.agents import action, code, hermes, react, searchr1  # noqa: F401  (registers them)
from agentfly.rollout.agents.base import (
    AGENTS,
    Agent,
    ParsedTurn,
    ToolCallRequest,
    get_agent,
    register_agent,
)

__all__ = ["AGENTS", "Agent", "ParsedTurn", "ToolCallRequest", "get_agent", "register_agent"]
