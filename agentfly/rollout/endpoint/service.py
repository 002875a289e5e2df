"""Chat completions on agentfly's engines: a request rendered by the chat template, sampled by the
engine pool, and the reply's tool calls read by the agent type's parser.

:class:`ChatService` answers a :class:`~agentfly.rollout.endpoint.openai_api.ChatRequest` in two ways:

- alone (``agentfly serve``'s ``/v1/chat/completions``): the request's sampling, within the
  server's limits; nothing is kept;
- for a chain (a harness chain's endpoint): the chain's :class:`~agentfly.rollout.endpoint.chain.ChainRecord`
  gives the prompt ids (its trajectory extended or a new segment) and the run's sampling, and
  keeps what the engine sampled. A chain's reply is one sample (``n`` = 1).

Each engine call has a deadline (``request_timeout``): past it the request is answered 504
and the program decides what to do.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import replace
from typing import Any

from agentfly.rollout.agents.base import Agent, ToolCallRequest
from agentfly.rollout.endpoint.chain import ChainRecord, template_messages
from agentfly.rollout.endpoint.openai_api import ChatRequest, Choice, RequestError, completion_body
from agentfly.rollout.engines.base import GenerationOutput, SamplingParams

HERMES_CALL = re.compile(r"\s*<tool_call>.*?(?:</tool_call>|$)", re.DOTALL)


def visible_content(agent: Agent, content: str, calls: list[ToolCallRequest]) -> str | None:
    """The reply's ``content`` as OpenAI's API gives it: the text without the tool-call blocks
    when the parser writes hermes ``<tool_call>`` blocks (vLLM's ``hermes`` parser does the
    same), else the whole text; None when nothing is left."""
    text = content
    if calls and "<tool_call>" in content:
        text = HERMES_CALL.sub("", content)
    text = text.strip()
    return text or None


class ChatService:
    """The engine, template and parser behind the OpenAI-compatible endpoint.

    Args:
        engine: the engine pool (``async generate(prompts, sampling)``).
        tokenizer: the model's tokenizer.
        template: the chat template.
        agent: the agent type whose parser reads the replies' tool calls.
        model_name: the model's name in replies and ``/v1/models``.
        sampling: the defaults of a request alone (temperature, top-p, top-k, ``max_tokens``,
            the template's stops).
        max_model_len: prompt plus reply tokens at most.
        request_timeout: seconds an engine call may take before the request is answered 504.
    """

    def __init__(
        self, *, engine: Any, tokenizer: Any, template: Any, agent: Agent, model_name: str,
        sampling: SamplingParams, max_model_len: int, request_timeout: float = 300.0,
    ) -> None:
        self.engine, self.tokenizer, self.template, self.agent = engine, tokenizer, template, agent
        self.model_name, self.sampling = model_name, sampling
        self.max_model_len, self.request_timeout = max_model_len, request_timeout
        self._count = 0

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    async def _generate(self, ids: list[int], sampling: SamplingParams) -> list[GenerationOutput]:
        try:
            (outs,) = await asyncio.wait_for(self.engine.generate([ids], sampling), self.request_timeout)
        except (TimeoutError, asyncio.TimeoutError):  # one class from 3.11 on, two on 3.10
            raise RequestError(f"the engine did not answer within {self.request_timeout:g} s "
                               "(request_timeout)", status=504, code="timeout") from None
        return list(outs)

    def _reply(self, out: GenerationOutput, request: ChatRequest, tag: str, k: int
               ) -> tuple[str, bool, list[ToolCallRequest], Choice]:
        text = self.tokenizer.decode(out.token_ids, skip_special_tokens=False)
        content, closed = self.template.split_turn(text)
        shown = content
        for s in request.stop or ():
            if shown.endswith(s):  # OpenAI leaves the stop string out of the reply
                shown = shown[: -len(s)]
                break
        calls: list[ToolCallRequest] = []
        if request.read_calls and request.tools:
            calls = self.agent.parse(content).calls
            if any(c.error or not isinstance(c.arguments, dict) for c in calls):
                calls = []  # a call the parser cannot read stays in the text
        tool_calls = [(f"call_{tag}_{k}_{i}", c.name, c.arguments) for i, c in enumerate(calls)]
        reason = "tool_calls" if calls else ("length" if out.finish_reason == "length" else "stop")
        logprobs = None
        if request.logprobs:
            logprobs = [(self.tokenizer.decode([t], skip_special_tokens=False), float(lp))
                        for t, lp in zip(out.token_ids, out.logprobs, strict=True)]
        shown_text = visible_content(self.agent, shown, calls) if calls else (shown.strip() or "")
        return content, closed, calls, Choice(shown_text, tool_calls, reason, logprobs)

    async def complete(self, request: ChatRequest, chain: ChainRecord | None = None) -> dict[str, Any]:
        """The ``chat.completion`` answering ``request`` (for ``chain`` when given).

        Raises:
            RequestError: what cannot be served (a 400 naming it), a chain past its limits, or
                an engine past ``request_timeout`` (504).
        """
        self._count += 1
        tag = f"{self._count:x}"
        if chain is not None:
            return await self._complete_chain(request, chain, tag)
        ids = self._encode(self.template.prompt(template_messages(request.messages, self.agent), request.tools))
        room = self.max_model_len - len(ids)
        if room <= 0:
            raise RequestError(f"the prompt is {len(ids)} tokens; the model's context is "
                               f"{self.max_model_len}", code="context_length_exceeded", param="messages")
        base = self.sampling
        sampling = replace(
            base, n=request.n,
            temperature=base.temperature if request.temperature is None else request.temperature,
            top_p=base.top_p if request.top_p is None else request.top_p,
            max_tokens=min(request.max_tokens or base.max_tokens, room),
            stop=[*(base.stop or []), *(request.stop or [])] or None, seed=request.seed,
        )
        outs = await self._generate(ids, sampling)
        choices = [self._reply(out, request, tag, k)[3] for k, out in enumerate(outs)]
        return completion_body(f"chatcmpl-{tag}", self.model_name, choices, len(ids),
                               sum(len(o.token_ids) for o in outs))

    async def _complete_chain(self, request: ChatRequest, chain: ChainRecord, tag: str) -> dict[str, Any]:
        if request.n != 1:
            raise RequestError("a chain's endpoint samples one reply per request (n=1)", param="n")
        async with chain.lock:  # a chain's requests one after another (endpoint/chain.py)
            chain.requests += 1
            before = chain.saved()
            ids = chain.prompt(request.messages, request.tools)
            try:
                outs = await self._generate(ids, chain.sampling_for(request.max_tokens, request.stop))
            except BaseException:  # a 504, an engine error, a cancelled request: its retry is its first time
                chain.restore(before)
                raise
            (out,) = outs
            content, closed, calls, choice = self._reply(out, request, tag, 0)
            reply = {"role": "assistant", "content": choice.content or "",
                     "tool_calls": [(name, args) for _, name, args in choice.tool_calls]}
            chain.record(request.messages, out, content, closed, calls, reply)
        return completion_body(f"chatcmpl-{tag}", self.model_name, [choice], len(ids), len(out.token_ids))
