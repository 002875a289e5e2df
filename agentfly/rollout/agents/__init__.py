"""Agent types by name: ``hermes`` (hermes tool calls; AgentFly's ``hf``), ``react``, ``code``,
``action``, ``searchr1`` (Search-R1's ``<search>``/``<answer>`` tags), ``bash_swe`` and
``qwen3coder_swe`` (the SWE agents), ``gui`` (AgentFly's GUI agent: ``Thought:``/``Action:`` on
screenshots); tool parsers by name: each agent type's, and
``qwen3_coder`` (Qwen3-Coder's XML tool calls)."""

from agentfly.rollout.agents import (  # noqa: F401  (registers them)
    action,
    bash_swe,
    code,
    gui,
    hermes,
    qwen3_coder,
    qwen3coder_swe,
    react,
    searchr1,
)
from agentfly.rollout.agents.base import (
    AGENTS,
    TOOL_PARSERS,
    Agent,
    ParsedTurn,
    ToolCallRequest,
    get_agent,
    register_agent,
    register_parser,
)

__all__ = [
    "AGENTS",
    "TOOL_PARSERS",
    "Agent",
    "ParsedTurn",
    "ToolCallRequest",
    "get_agent",
    "register_agent",
    "register_parser",
]
