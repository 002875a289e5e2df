"""One chain's record of its HTTP traffic: the token-exact trajectory of a program's requests.

A harness chain (:mod:`agentfly.rollout.harness`) talks to the server through its own endpoint;
:class:`ChainRecord` turns the requests it sends into a :class:`~agentfly.core.trajectory.Trajectory`
without ever re-tokenizing what the engine sampled:

- the first request's conversation is rendered by the template and tokenized: the prompt;
- each reply appends the ids the engine sampled, with their log-probabilities (loss mask 1);
- a later request that *extends* the conversation (every earlier message as sent, then the
  reply as the server gave it, then new tool or user messages) appends the template's text
  between turns for the new messages, tokenized on its own (loss mask 0), exactly as the
  built-in agent loop does;
- a request that rewrites its history (drops, edits or summarizes a message, changes the
  tools, or extends a conversation that was not the last one answered) starts a new segment
  (:meth:`~agentfly.core.trajectory.Trajectory.fold`): that request rendered and tokenized is
  its prompt. Each segment holds exactly the ids the engine was given and sampled; the count
  of such breaks is ``ChainRecord.breaks`` (``rollout/harness_breaks``).

The chain's limits hold as in the built-in loop: ``max_turns`` replies at most, and the
context and response budgets; a request past one is refused (the program sees a 400 naming it)
and the chain ends with that finish reason.

A chain's requests are answered one after another (:attr:`ChainRecord.lock`, held by
:class:`~agentfly.rollout.endpoint.service.ChatService` from the prompt to the recorded reply):
a program that sends two at once (best-of-n, parallel branches, sub-agents on one conversation)
has the second rendered after the first is recorded, so it extends it or starts a segment of its
own, and never lands after a reply it was not sampled from. A request whose engine call fails
(504 past ``request_timeout``, an engine error, a client gone) leaves the record as it found it
(:meth:`ChainRecord.saved` / :meth:`ChainRecord.restore`): the client's retry of it is
recorded once, as if it had been sent once.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

from agentfly.core.trajectory import ToolCallRecord, Trajectory
from agentfly.rollout.agents.base import Agent, ToolCallRequest
from agentfly.rollout.endpoint.openai_api import RequestError
from agentfly.rollout.engines.base import GenerationOutput, SamplingParams


def _view(message: dict[str, Any]) -> tuple[Any, ...]:
    """What of a message must be equal for a request to extend the last one."""
    calls = tuple((n, json.dumps(a, sort_keys=True)) for n, a in message.get("tool_calls") or ())
    return message["role"], (message.get("content") or "").strip(), calls


def template_messages(messages: list[dict[str, Any]], agent: Agent) -> list[dict[str, Any]]:
    """Request messages as the template renders them: an assistant message's structured calls
    written into its text the way the agent type writes them (so that its parser reads them)."""
    out = []
    for m in messages:
        if m["role"] == "assistant" and m.get("tool_calls"):
            written = agent.write_calls([ToolCallRequest(n, a) for n, a in m["tool_calls"]])
            content = f"{m['content']}\n{written}" if m["content"] else written
            out.append({"role": "assistant", "content": content})
        else:
            out.append({"role": m["role"], "content": m["content"]})
    return out


class ChainRecord:
    """The trajectory one chain's requests make (see the module docstring).

    Args:
        traj: the chain's trajectory (group, chain index and row set; no tokens yet).
        tokenizer: encodes rendered text.
        template: the chat template.
        agent: the agent type whose ``write_calls`` renders a rewritten history's calls.
        sampling: the chain's sampling (the run's temperature, top-p, top-k, seed and per-turn
            ``max_tokens``); a request may lower ``max_tokens`` and add stop strings only.
        max_model_len: prompt plus response tokens at most.
        max_response_len: response tokens at most (None: only ``max_model_len``).
        max_turns: replies at most.
    """

    def __init__(
        self, traj: Trajectory, *, tokenizer: Any, template: Any, agent: Agent,
        sampling: SamplingParams, max_model_len: int, max_response_len: int | None, max_turns: int,
    ) -> None:
        self.traj = traj
        self.tokenizer, self.template, self.agent = tokenizer, template, agent
        self.sampling = sampling
        self.max_model_len, self.max_response_len, self.max_turns = max_model_len, max_response_len, max_turns
        self.expected: list[dict[str, Any]] | None = None  # the conversation a next request extends
        self.tools: Any = None
        self.closed = True
        self.breaks = 0
        self.requests = 0
        self.malformed: list[str] = []
        self.finish_reason: str | None = None  # a limit the chain reached
        self.last_content = ""
        self.open = True
        self._anchor = ""
        self.lock = asyncio.Lock()  # one request of the chain at a time (the module docstring)

    _TOKEN_FIELDS = ("prompt_ids", "response_ids", "loss_mask", "rollout_logprobs", "turn_ids",
                     "policy_versions", "messages", "folded", "images")

    def saved(self) -> tuple[Any, ...]:
        """What :meth:`prompt` changes, to put back with :meth:`restore` when the engine call
        that follows it fails."""
        traj = self.traj
        fields = {k: list(getattr(traj, k)) for k in self._TOKEN_FIELDS}
        observations = [c.observation for c in traj.tool_calls]
        return fields, observations, self.expected, self.tools, self.breaks, self._anchor

    def restore(self, saved: tuple[Any, ...]) -> None:
        """Undo the :meth:`prompt` of a request whose engine call failed (see :meth:`saved`)."""
        fields, observations, self.expected, self.tools, self.breaks, self._anchor = saved
        for name, value in fields.items():
            setattr(self.traj, name, value)
        for call, text in zip(self.traj.tool_calls, observations, strict=True):
            call.observation = text

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def _budget(self) -> tuple[int, str]:
        return self.traj.room(self.max_model_len, self.max_response_len)

    def _refuse(self, reason: str, message: str) -> RequestError:
        self.finish_reason = self.finish_reason or reason
        return RequestError(message, code="context_length_exceeded" if "len" in reason else reason)

    def _extends(self, messages: list[dict[str, Any]], tools: Any) -> bool:
        expected = self.expected
        if expected is None or tools != self.tools or len(messages) <= len(expected):
            return False
        new = messages[len(expected):]
        return (all(_view(a) == _view(b) for a, b in zip(messages, expected, strict=False))
                and all(m["role"] != "assistant" for m in new))

    def prompt(self, messages: list[dict[str, Any]], tools: Any) -> list[int]:
        """The ids the engine is given for this request, appended to the trajectory.

        Raises:
            RequestError: the chain is over (closed), or past ``max_turns``, or the request
                leaves no room to generate (the chain then ends with that finish reason).
        """
        if not self.open:
            raise RequestError("this chain is over: its harness run has ended", status=410, code="chain_over")
        if self.finish_reason is not None:
            raise RequestError(f"this chain has ended ({self.finish_reason})", code=self.finish_reason)
        traj = self.traj
        if traj.num_turns >= self.max_turns:
            raise self._refuse("max_turns", f"the chain has used its {self.max_turns} turns (agent.max_turns)")
        rendered = template_messages(messages, self.agent)
        if traj.num_turns == 0 and self.expected is None:  # the chain's first request
            traj.prompt_ids, traj.messages = self._encode(self.template.prompt(rendered, tools)), rendered
            self._anchor = rendered[-1]["content"] if rendered else ""
            if len(traj.prompt_ids) >= self.max_model_len:
                raise self._refuse("prompt_too_long", f"the prompt is {len(traj.prompt_ids)} tokens, "
                                                      f"max_model_len={self.max_model_len}")
        elif self._extends(messages, tools):
            assert self.expected is not None
            new = rendered[len(self.expected):]
            between = self._encode(self.template.between_turns([*traj.messages, *new], tools, closed=self.closed))
            room, limit = self._budget()
            if len(between) >= room:
                raise self._refuse(limit, f"the new messages ({len(between)} tokens) leave no room to "
                                          f"generate ({limit} reached)")
            traj.append_observation(between)
            traj.messages.extend(new)
            self._observe([m["content"] for m in new if m["role"] == "tool"])
            self._anchor = "\n".join(m["content"] for m in new)
        else:  # the history was rewritten: a new segment, trained on what it is given and samples
            ids = self._encode(self.template.prompt(rendered, tools))
            if len(ids) >= self.max_model_len:
                raise self._refuse("max_model_len", f"the rewritten history is {len(ids)} tokens, "
                                                    f"max_model_len={self.max_model_len}")
            traj.fold(ids, rendered)
            self.breaks += 1
            self._anchor = rendered[-1]["content"] if rendered else ""
        budget, limit = self._budget()
        if budget <= 0:
            raise self._refuse(limit, f"no room left to generate ({limit} reached)")
        self.tools = tools
        return list(traj.input_ids)

    def _observe(self, observations: list[str]) -> None:
        """Give the last turn's recorded calls the tool results the program answered them with."""
        turn = self.traj.num_turns - 1
        calls = [c for c in self.traj.tool_calls if c.turn == turn]
        for call, text in zip(calls, observations, strict=False):
            call.observation = text

    def sampling_for(self, max_tokens: int | None, stop: list[str] | None) -> SamplingParams:
        """The chain's sampling for one request: the run's, within the room left and the
        request's ``max_tokens``, with the request's stop strings added."""
        budget, _ = self._budget()
        limit = min(self.sampling.max_tokens, budget, max_tokens or budget)
        stops = [*(self.sampling.stop or []), *(stop or [])] or None
        return replace(self.sampling, n=1, max_tokens=limit, stop=stops)

    def record(
        self, messages: list[dict[str, Any]], out: GenerationOutput, content: str, closed: bool,
        calls: list[ToolCallRequest], reply: dict[str, Any],
    ) -> None:
        """Append a reply: its sampled ids (trained on), its calls, and what a next request
        must repeat to extend it (``messages`` then ``reply``, in the request's form)."""
        traj = self.traj
        traj.append_sampled(out.token_ids, out.logprobs, getattr(out, "weights_version", 0))
        turn = traj.num_turns
        traj.num_turns += 1
        traj.turn_rewards.append(0.0)
        traj.turn_anchors.append(self._anchor)
        traj.messages.append({"role": "assistant", "content": content})
        if out.finish_reason == "length":
            traj.truncated = True
        for call in calls:
            traj.tool_calls.append(ToolCallRecord(call.name, call.arguments, "", True, None, turn, None))
        self.closed, self.last_content = closed, content
        self.expected = [*messages, reply]
