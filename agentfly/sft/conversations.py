"""A chat conversation laid out as the agent loop lays out a chain: the same ids, the same mask.

``agentfly sft`` trains on conversations (OpenAI-style ``messages``: ``system``, ``user``,
``assistant`` with text and/or structured ``tool_calls``, ``tool`` results). Each becomes a
:class:`~agentfly.core.trajectory.Trajectory` built the way :mod:`agentfly.rollout.agent_loop`
builds one, with the run's agent type and chat template:

- the prompt: the messages before the first assistant turn, with the agent's system prompt
  first when the conversation has no system message of its own (the loop's
  :meth:`~agentfly.rollout.agents.base.Agent.initial_messages`), rendered with the agent's tool
  schemas by :meth:`~agentfly.rollout.templates.base.ChatTemplate.prompt`; loss mask 0;
- each assistant turn: its text (structured ``tool_calls`` written by the agent type,
  :meth:`~agentfly.rollout.agents.base.Agent.write_calls`) and the template's end-of-turn marker,
  tokenized on their own, as an engine samples a turn; loss mask 1;
- between two assistant turns: the tool results as the agent type answers its calls
  (:meth:`~agentfly.rollout.agents.base.Agent.observation_messages`), then any user message, as
  the template's text between turns, tokenized on its own; loss mask 0.

A conversation whose assistant turns ask for tools is the loop's chain exactly when the loop's
engine samples the same texts (``tests/sft/test_conversations.py`` replays them through the
scripted engine). Messages after the last assistant turn are left out: a chain ends with its last
sampled turn. What the run's agent type would not read as written is refused as a
:class:`BadRow`: no assistant turn, a tool call that does not parse, a call of a tool the agent
does not have, tool results that do not answer the turn before them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agentfly.core.trajectory import Trajectory
from agentfly.rollout.agents.base import Agent, ToolCallRequest
from agentfly.rollout.templates.base import ChatTemplate

ROLES = ("system", "user", "assistant", "tool")


class BadRow(ValueError):
    """A row ``agentfly sft`` cannot train on; the message says why (the reader adds where)."""


def _text(content: Any, where: str) -> str:
    """A message's content as text: a string, None (empty), or a list of ``{"type": "text"}`` parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in content):
        return "".join(str(p.get("text", "")) for p in content)
    raise BadRow(f"{where}: content must be text (or a list of text parts), got {type(content).__name__}")


def checked_messages(messages: Any) -> list[dict[str, Any]]:
    """``messages`` as ``{role, content[, tool_calls]}`` dicts with text content.

    Raises:
        BadRow: not a list of messages, an unknown role, content that is not text.
    """
    if not isinstance(messages, list) or not messages:
        raise BadRow(f"the messages must be a non-empty list, got {type(messages).__name__}")
    out = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            role = m.get("role") if isinstance(m, dict) else type(m).__name__
            raise BadRow(f"{where}: a message needs a role among {', '.join(ROLES)}, got {role!r}")
        message = {"role": m["role"], "content": _text(m.get("content"), where)}
        if m.get("tool_calls"):
            if m["role"] != "assistant":
                raise BadRow(f"{where}: only an assistant message makes tool calls")
            message["tool_calls"] = m["tool_calls"]
        out.append(message)
    return out


def call_request(call: Any, where: str) -> ToolCallRequest:
    """A structured tool call (OpenAI's ``{"function": {"name", "arguments"}}``, or
    ``{"name", "arguments"}``) as a request; ``arguments`` may be a JSON string.

    Raises:
        BadRow: no name, or arguments that are not a JSON object.
    """
    fn = call.get("function", call) if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
        raise BadRow(f"{where}: a tool call needs a name ({{'function': {{'name': ..., 'arguments': ...}}}})")
    args = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as e:
            raise BadRow(f"{where}: the arguments of tool call {fn['name']!r} are not JSON ({e.msg})") from None
    if not isinstance(args, dict):
        raise BadRow(f"{where}: the arguments of tool call {fn['name']!r} are not a JSON object")
    return ToolCallRequest(fn["name"], args)


def _comparable(call: ToolCallRequest) -> tuple[str, Any]:
    """A call's name and arguments, whitespace at the end of a text argument aside (the code
    agent reads a fenced block with its closing newline)."""
    args = call.arguments
    if isinstance(args, dict):
        args = {k: v.rstrip() if isinstance(v, str) else v for k, v in args.items()}
    return call.name, args


def turn_problem(agent: Agent, text: str) -> str | None:
    """Why the agent type would not run the tool calls of an assistant turn ``text`` as written
    (a call that does not parse, arguments that are not an object, a tool it does not have); None
    when it would."""
    known = {n for t in agent.tools for n in (t.name, *getattr(t, "aliases", ()))}
    for call in agent.parse(text).calls:
        if call.error is not None:
            return f"a tool call does not parse under agent type {agent.name!r}: {call.error}"
        if not isinstance(call.arguments, dict):
            return f"the arguments of tool call {call.name!r} are not a JSON object under agent type {agent.name!r}"
        if call.name not in known:
            tools = ", ".join(sorted(known)) or "none"
            return f"calls tool {call.name!r}, which is not among agent.init_config.tools ({tools})"
    return None


@dataclass
class ConversationRenderer:
    """Lays out conversations with the run's agent type, chat template and tokenizer.

    Attributes:
        agent: the agent type, with its configured tools and system prompt.
        template: the chat template.
        tokenizer: the model's tokenizer.
    """

    agent: Agent
    template: ChatTemplate
    tokenizer: Any

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def render(self, messages: Any) -> Trajectory:
        """The conversation as a trajectory (see the module docstring).

        Raises:
            BadRow: naming the message and why.
        """
        msgs = checked_messages(messages)
        starts = [i for i, m in enumerate(msgs) if m["role"] == "assistant"]
        if not starts:
            raise BadRow("no assistant turn: nothing to train on")
        head = [{"role": m["role"], "content": m["content"]} for m in msgs[: starts[0]]]
        system = self.agent.system_prompt
        if system and (not head or head[0]["role"] != "system"):
            head.insert(0, {"role": "system", "content": system})
        tools = self.agent.template_tools()
        traj = Trajectory(prompt_ids=self._encode(self.template.prompt(head, tools)), messages=head)
        for start, end in zip(starts, [*starts[1:], None], strict=True):
            content, calls = self._turn(msgs[start], start)
            ids = self._encode(content + self.template.end_of_turn)
            traj.append_sampled(ids, [0.0] * len(ids))
            traj.num_turns += 1
            traj.messages.append({"role": "assistant", "content": content})
            if end is None:
                break
            answer = self._answer(calls, msgs[start + 1 : end], start)
            between = self.template.between_turns([*traj.messages, *answer], tools, closed=True)
            traj.append_observation(self._encode(between))
            traj.messages.extend(answer)
        traj.final_response = traj.messages[-1]["content"]
        return traj

    def _turn(self, message: dict[str, Any], index: int) -> tuple[str, list[ToolCallRequest]]:
        """An assistant message's text as the agent type writes it, and its calls as it reads them."""
        where = f"messages[{index}]"
        content = message["content"]
        requests = [call_request(c, where) for c in message.get("tool_calls") or []]
        if requests:
            try:
                written = self.agent.write_calls(requests)
            except (NotImplementedError, ValueError) as e:
                raise BadRow(f"{where}: {e}") from None
            content = f"{content}\n{written}" if content else written
        problem = turn_problem(self.agent, content)
        if problem:
            raise BadRow(f"{where}: {problem}")
        calls = self.agent.parse(content).calls
        if requests and list(map(_comparable, calls)) != list(map(_comparable, requests)):
            read_back = [(c.name, c.arguments) for c in calls]
            raise BadRow(
                f"{where}: agent type {self.agent.name!r} reads its {len(requests)} written tool "
                f"call(s) back as {read_back}"
            )
        return content, calls

    def _answer(self, calls: list[ToolCallRequest], between: list[dict[str, Any]], index: int) -> list[dict[str, Any]]:
        """The messages between two assistant turns as the loop writes them: the tool results
        as the agent type answers ``calls``, then the others as they are."""
        results = 0
        while results < len(between) and between[results]["role"] == "tool":
            results += 1
        if any(m["role"] == "tool" for m in between[results:]):
            raise BadRow(f"messages[{index}]: a tool result follows a user or system message, not the tool call")
        if len(calls) != results:
            raise BadRow(
                f"messages[{index}]: the assistant turn makes {len(calls)} tool call(s), and "
                f"{results} tool result(s) follow it"
            )
        observations = self.agent.observation_messages(calls, [m["content"] for m in between[:results]]) if calls else []
        return [*observations, *({"role": m["role"], "content": m["content"]} for m in between[results:])]
