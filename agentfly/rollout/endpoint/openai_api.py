"""OpenAI's chat-completions wire format, read and written: requests in, replies out.

:func:`parse_request` reads a ``POST /v1/chat/completions`` body into a :class:`ChatRequest`
(messages as the chat templates take them, tools as their JSON schemas) or raises
:class:`RequestError`, which the server answers with a 400 naming the field. What is refused,
and why:

- ``stream``: replies are whole (the engines return whole samples);
- ``tool_choice`` ``"required"`` or a named function: there is no constrained decoding, so the
  server could not keep that promise (``"auto"`` and ``"none"`` are kept: ``none`` still shows
  the tools to the model but reads no calls from its reply);
- ``top_logprobs`` > 0: the engines give the sampled token's log-probability only;
- ``logit_bias``, non-zero ``presence_penalty``/``frequency_penalty``, a ``response_format``
  other than text, the legacy ``functions``: not built;
- any other field OpenAI's API does not have, and image parts (a text model's server).

Accepted and not acted on: ``user``, ``metadata``, ``store``, ``parallel_tool_calls`` (the
model's parser reads every call it wrote), ``service_tier``.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from typing import Any

CHAT_FIELDS = {
    "model", "messages", "tools", "tool_choice", "temperature", "top_p", "max_tokens",
    "max_completion_tokens", "n", "stop", "logprobs", "top_logprobs", "seed", "stream",
    "user", "metadata", "store", "parallel_tool_calls", "service_tier", "presence_penalty",
    "frequency_penalty", "logit_bias", "response_format", "functions", "function_call",
    "stream_options",
}
IGNORED_FIELDS = ("user", "metadata", "store", "parallel_tool_calls", "service_tier")


class RequestError(ValueError):
    """A request the server cannot answer as asked: a 400 (or ``status``) naming why."""

    def __init__(self, message: str, *, param: str | None = None, status: int = 400,
                 code: str = "invalid_request") -> None:
        super().__init__(message)
        self.param, self.status, self.code = param, status, code

    def body(self) -> dict[str, Any]:
        """OpenAI's error object."""
        return {"error": {"message": str(self), "type": "invalid_request_error",
                          "param": self.param, "code": self.code}}


@dataclass
class ChatRequest:
    """A chat-completions request, read.

    Attributes:
        messages: the conversation as the templates take it (``{"role", "content"}``; an
            assistant message's structured calls in ``tool_calls`` as ``(name, arguments)``).
        tools: the tools' JSON schemas (OpenAI's ``{"type": "function", "function": {...}}``),
            or None.
        read_calls: read tool calls from the reply (``tool_choice`` is not ``"none"``).
        temperature, top_p, max_tokens, n, stop, seed: the sampling asked for (None: the
            server's own).
        logprobs: return each sampled token's log-probability.
    """

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    read_calls: bool = True
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    n: int = 1
    stop: list[str] | None = None
    seed: int | None = None
    logprobs: bool = False
    model: str | None = None
    raw_messages: list[Any] = field(default_factory=list)


def _number(body: dict[str, Any], key: str, low: float, high: float) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RequestError(f"{key} must be a number, got {value!r}", param=key)
    if not low <= value <= high:
        raise RequestError(f"{key} must be within [{low}, {high}], got {value}", param=key)
    return float(value)


def _count(body: dict[str, Any], key: str, low: int = 1) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise RequestError(f"{key} must be an integer >= {low}, got {value!r}", param=key)
    return value


def content_text(content: Any, where: str) -> str:
    """A message's text: a string, null, or a list of text parts (joined)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for k, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind != "text" or not isinstance(part.get("text"), str):
                raise RequestError(
                    f"{where}.content[{k}]: only text parts are served (got {kind or part!r}); "
                    "this server's model takes no images", param="messages")
            texts.append(part["text"])
        return "".join(texts)
    raise RequestError(f"{where}.content must be a string, null or a list of text parts", param="messages")


def _tool_call(call: Any, where: str) -> tuple[str, dict[str, Any]]:
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
        raise RequestError(f"{where}: a tool call needs function.name", param="messages")
    args = fn.get("arguments", "{}")
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as e:
            raise RequestError(f"{where}: function.arguments is not JSON ({e.msg})", param="messages") from None
    if not isinstance(args, dict):
        raise RequestError(f"{where}: function.arguments is not a JSON object", param="messages")
    return fn["name"], args


def read_messages(raw: Any) -> list[dict[str, Any]]:
    """OpenAI messages as the templates take them; ``developer`` is ``system``.

    An assistant message keeps its text in ``content`` and its calls as ``tool_calls``
    ``[(name, arguments), ...]``; a tool message keeps its text (its ``tool_call_id`` is not
    shown to the model by any template here).
    """
    if not isinstance(raw, list) or not raw:
        raise RequestError("messages must be a non-empty list", param="messages")
    out = []
    for i, m in enumerate(raw):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise RequestError(f"{where} is not an object", param="messages")
        role = m.get("role")
        if role == "developer":
            role = "system"
        if role not in ("system", "user", "assistant", "tool"):
            raise RequestError(f"{where}.role {m.get('role')!r} is not system, developer, user, assistant or tool",
                               param="messages")
        message: dict[str, Any] = {"role": role, "content": content_text(m.get("content"), where)}
        if role == "assistant" and m.get("tool_calls"):
            if not isinstance(m["tool_calls"], list):
                raise RequestError(f"{where}.tool_calls must be a list", param="messages")
            message["tool_calls"] = [_tool_call(c, f"{where}.tool_calls[{k}]") for k, c in enumerate(m["tool_calls"])]
        out.append(message)
    return out


def read_tools(raw: Any) -> list[dict[str, Any]] | None:
    """OpenAI's ``tools`` (function tools only) as the schemas the templates show."""
    if raw is None or raw == []:
        return None
    if not isinstance(raw, list):
        raise RequestError("tools must be a list", param="tools")
    tools = []
    for k, tool in enumerate(raw):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(fn, dict):
            raise RequestError(f"tools[{k}] must be {{'type': 'function', 'function': {{...}}}}", param="tools")
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            raise RequestError(f"tools[{k}].function.name is missing", param="tools")
        schema = {"name": fn["name"], "description": fn.get("description", ""),
                  "parameters": fn.get("parameters") or {"type": "object", "properties": {}}}
        tools.append({"type": "function", "function": schema})
    return tools


def parse_request(body: Any) -> ChatRequest:
    """Read a chat-completions body; raises :class:`RequestError` naming what cannot be served."""
    if not isinstance(body, dict):
        raise RequestError("the body must be a JSON object")
    unknown = sorted(set(body) - CHAT_FIELDS)
    if unknown:
        raise RequestError(f"unsupported parameter(s): {', '.join(unknown)}", param=unknown[0])
    if body.get("stream"):
        raise RequestError("stream=true is not supported: replies are sent whole", param="stream")
    for key in ("functions", "function_call", "logit_bias"):
        if body.get(key):
            raise RequestError(f"{key} is not supported (use tools)" if key != "logit_bias"
                               else "logit_bias is not supported", param=key)
    for key in ("presence_penalty", "frequency_penalty"):
        if body.get(key):
            raise RequestError(f"{key} is not supported (only 0)", param=key)
    fmt = body.get("response_format")
    if fmt is not None and not (isinstance(fmt, dict) and fmt.get("type") == "text"):
        raise RequestError("response_format other than {'type': 'text'} is not supported", param="response_format")
    if _count(body, "top_logprobs", 0):
        raise RequestError("top_logprobs is not supported: the engines give the sampled token's "
                           "log-probability only (logprobs=true)", param="top_logprobs")
    choice = body.get("tool_choice", "auto")
    if choice not in ("auto", "none"):
        raise RequestError(f"tool_choice {choice!r} is not supported: without constrained decoding "
                           "only 'auto' and 'none' can be kept", param="tool_choice")
    stop = body.get("stop")
    if isinstance(stop, str):
        stop = [stop]
    if stop is not None and not (isinstance(stop, list) and all(isinstance(s, str) and s for s in stop)):
        raise RequestError("stop must be a string or a list of non-empty strings", param="stop")
    max_tokens = _count(body, "max_completion_tokens") or _count(body, "max_tokens")
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise RequestError(f"seed must be an integer, got {seed!r}", param="seed")
    if not isinstance(body.get("logprobs", False), bool):
        raise RequestError("logprobs must be true or false", param="logprobs")
    return ChatRequest(
        messages=read_messages(body.get("messages")),
        tools=read_tools(body.get("tools")),
        read_calls=choice != "none",
        temperature=_number(body, "temperature", 0.0, 2.0),
        top_p=_number(body, "top_p", 1e-9, 1.0),
        max_tokens=max_tokens,
        n=_count(body, "n") or 1,
        stop=stop or None,
        seed=seed,
        logprobs=bool(body.get("logprobs", False)),
        model=body.get("model"),
        raw_messages=list(body.get("messages") or []),
    )


@dataclass
class Choice:
    """One sampled reply: its visible text, its tool calls ``(id, name, arguments)``, why it
    ended, and (when asked) each token's text and log-probability."""

    content: str | None
    tool_calls: list[tuple[str, str, dict[str, Any]]]
    finish_reason: str
    logprobs: list[tuple[str, float]] | None = None


def completion_body(
    request_id: str, model: str, choices: list[Choice], prompt_tokens: int, completion_tokens: int
) -> dict[str, Any]:
    """A ``chat.completion`` object as OpenAI's API writes it."""
    out = []
    for k, c in enumerate(choices):
        message: dict[str, Any] = {"role": "assistant", "content": c.content}
        if c.tool_calls:
            message["tool_calls"] = [
                {"id": cid, "type": "function",
                 "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}}
                for cid, name, args in c.tool_calls
            ]
        logprobs = None
        if c.logprobs is not None:
            logprobs = {"content": [
                {"token": tok, "logprob": lp, "bytes": list(tok.encode("utf-8")), "top_logprobs": []}
                for tok, lp in c.logprobs
            ]}
        out.append({"index": k, "message": message, "logprobs": logprobs, "finish_reason": c.finish_reason})
    return {
        "id": request_id, "object": "chat.completion", "created": int(time.time()), "model": model,
        "choices": out,
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }


def models_body(model: str) -> dict[str, Any]:
    """``GET /v1/models``: the one model served."""
    return {"object": "list", "data": [{"id": model, "object": "model", "created": 0, "owned_by": "agentfly"}]}
