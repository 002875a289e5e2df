"""Agent types: how a model's turn is read as actions, and how tools are described to it.

An agent type is a parser plus prompting conventions, not a loop: the one agent loop
(:mod:`agentfly.rollout.agent_loop`) asks the agent to ``parse`` each sampled turn into tool
calls (or a final answer) and to turn tool results into the messages that answer the turn.
Register a new type with ``@register_agent("name")`` on a subclass of :class:`Agent`.

Tool parsers (``agent.init_config.tool_parser_name``) have a registry of their own,
:data:`TOOL_PARSERS`: every agent type's parser under the type's name (``register_agent`` puts
it there too), and parsers that are no agent type of their own (``qwen3_coder``), registered
with ``@register_parser("name")``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentfly.core.registry import Registry


@dataclass
class ToolCallRequest:
    """A tool call read from the model's text.

    ``arguments`` is a dict, or the raw string when the model's arguments were not a JSON object
    (the tool layer then answers with an error observation). ``error`` is set when the call could
    not be read at all (e.g. a ``<tool_call>`` block that is not JSON); the loop answers it
    without running anything, counted as ``error_kind`` (``cut_off``: the turn ended at
    ``max_tokens`` inside the call, set by the loop).
    """

    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)
    error: str | None = None
    error_kind: str = "invalid_arguments"


@dataclass
class ParsedTurn:
    """What one assistant turn asks for: tool calls, or a final answer, or neither."""

    calls: list[ToolCallRequest] = field(default_factory=list)
    answer: str | None = None


def single_call_argument(
    calls: list[ToolCallRequest], agent_type: str, tool: str, argument: str, what: str
) -> Any:
    """``argument`` of the one call of ``tool`` that a turn of ``agent_type`` writes (agents
    whose turn holds a single call: ``searchr1``'s search, ``bash_swe``'s command); ``what``
    names that call in the message.

    Raises:
        ValueError: several calls, another tool, or arguments other than ``argument``.
    """
    if len(calls) != 1:
        raise ValueError(f"a {agent_type} turn holds one {what}; got {len(calls)} calls")
    (call,) = calls
    args = call.arguments
    if call.name != tool or not isinstance(args, dict) or set(args) != {argument}:
        raise ValueError(
            f"a {agent_type} turn can only write {tool}({argument}=...); got {call.name}({args!r})"
        )
    return args[argument]


class Agent:
    """Base agent type. Subclasses implement :meth:`parse`.

    Args:
        tools: the tools the agent may call (``Tool`` objects from the tool registry).
        system_prompt: replaces the agent's default system prompt when given.
    """

    name = "base"
    #: pass the tools' JSON schemas to the chat template (hermes-style tool blocks)
    tools_in_template = False
    #: read turns with :meth:`parse` even when ``get_agent`` is given another ``parser``
    #: (AgentFly's ``searchr1`` never consults the ``tool_parser_name`` its script names)
    keeps_own_parser = False

    def __init__(self, tools: list[Any], system_prompt: str | None = None) -> None:
        self.tools = list(tools)
        self._system_prompt = system_prompt

    @property
    def tool_names(self) -> list[str]:
        return [t.name for t in self.tools]

    def default_system_prompt(self) -> str | None:
        """The agent type's own system prompt (None: the template's default)."""
        return None

    @property
    def system_prompt(self) -> str | None:
        return (
            self._system_prompt if self._system_prompt is not None else self.default_system_prompt()
        )

    def template_tools(self) -> list[dict[str, Any]] | None:
        """Tool schemas for the chat template, or None when the agent describes tools itself."""
        return [t.schema for t in self.tools] if self.tools_in_template and self.tools else None

    def initial_messages(self, question: str) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        if self.system_prompt:
            messages.append({"role": "system", "content": self.system_prompt})
        messages.append({"role": "user", "content": question})
        return messages

    def parse(self, text: str) -> ParsedTurn:
        raise NotImplementedError

    def write_calls(self, calls: list[ToolCallRequest]) -> str:
        """The text of ``calls`` as this agent type writes them in an assistant turn, so that
        :meth:`parse` reads them back (``agentfly sft`` writes a conversation's structured
        ``tool_calls`` with it).

        Raises:
            NotImplementedError: the agent type has no written form of tool calls.
            ValueError: a call it cannot write (the message says why).
        """
        raise NotImplementedError(f"agent type {self.name!r} does not write tool calls")

    def observation_messages(
        self, calls: list[ToolCallRequest], observations: list[str]
    ) -> list[dict[str, Any]]:
        """Messages that answer a turn's tool calls (one ``tool`` message per call)."""
        return [{"role": "tool", "content": obs} for obs in observations]

    def single_argument(self, tool_name: str, value: str) -> dict[str, Any] | str:
        """Map a bare string onto a tool's only required parameter (ReAct/action inputs)."""
        for t in self.tools:
            if tool_name in (t.name, *getattr(t, "aliases", ())):
                params = t.parameters
                required = params.get("required") or list(params.get("properties", {}))
                if len(required) == 1:
                    return {required[0]: value}
        return value


def _as_agent(obj: Any, spec: str) -> type[Agent]:
    """A ``module:attr`` agent type: a subclass of :class:`Agent`."""
    if isinstance(obj, type) and issubclass(obj, Agent):
        return obj
    raise TypeError(f"expected a subclass of agentfly.rollout.agents.Agent, got {obj!r}")


AGENTS: Registry[type[Agent]] = Registry("agent type", coerce=_as_agent)
#: the classes whose ``parse`` reads the model's turns, by tool parser name
TOOL_PARSERS: Registry[type[Agent]] = Registry("tool parser", coerce=_as_agent)


def register_agent(name: str, *, aliases: tuple[str, ...] = ()):
    """Class decorator registering an agent type under ``name`` (and its parser, by that name)."""

    def decorator(cls: type[Agent]) -> type[Agent]:
        cls.name = name
        AGENTS.register(name, cls, aliases=aliases)
        TOOL_PARSERS.register(name, cls, aliases=aliases)
        return cls

    return decorator


def register_parser(name: str, *, aliases: tuple[str, ...] = ()):
    """Class decorator registering a tool parser that is not an agent type: its ``parse``
    (and ``write_calls``) are what ``tool_parser_name=name`` gives an agent."""

    def decorator(cls: type[Agent]) -> type[Agent]:
        cls.name = name
        TOOL_PARSERS.register(name, cls, aliases=aliases)
        return cls

    return decorator


def get_agent(
    name: str, tools: list[Any], system_prompt: str | None = None, parser: str | None = None
) -> Agent:
    """Build the agent type ``name``.

    Args:
        name: registered agent type (prompting and parsing).
        tools: the tools it may call.
        system_prompt: replaces the type's default system prompt.
        parser: a registered tool parser (an agent type's, e.g. ``hermes``, or ``qwen3_coder``)
            that reads the model's turns instead of the type's own
            (``agent.init_config.tool_parser_name``); ignored by a type that keeps its own parser
            (``keeps_own_parser``: ``searchr1``, ``bash_swe``).

    Raises:
        UnknownNameError: an unknown agent type or tool parser (the message names the known ones).
    """
    agent = AGENTS.get(name)(tools, system_prompt)
    if parser is not None:
        reader = TOOL_PARSERS.get(parser)  # an unknown name is refused even where it is ignored
        # an agent type that subclasses the parser (qwen3coder_swe) keeps its refinement of it
        if not agent.keeps_own_parser and not isinstance(agent, reader):
            agent.parse = reader(tools, system_prompt).parse  # type: ignore[method-assign]
    return agent
