"""OpenAI's chat-completions format, read and written: what is served, and a 400 naming the field
for what is not."""

from __future__ import annotations

import json

import pytest

from agentfly.rollout.endpoint.openai_api import (
    Choice,
    RequestError,
    completion_body,
    parse_request,
)


def body(**kw):
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], **kw}


def test_a_request_reads_messages_tools_and_sampling():
    req = parse_request(body(
        messages=[
            {"role": "developer", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "2+"}, {"type": "text", "text": "3?"}]},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "calculator", "arguments": '{"expression": "2+3"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "5"},
        ],
        tools=[{"type": "function", "function": {"name": "calculator", "parameters": {"type": "object"}}}],
        temperature=0.5, top_p=0.9, max_completion_tokens=7, n=2, stop="END", seed=3, logprobs=True,
    ))
    assert req.messages == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "2+3?"},
        {"role": "assistant", "content": "", "tool_calls": [("calculator", {"expression": "2+3"})]},
        {"role": "tool", "content": "5"},
    ]
    assert req.tools == [{"type": "function", "function": {
        "name": "calculator", "description": "", "parameters": {"type": "object"}}}]
    assert (req.temperature, req.top_p, req.max_tokens, req.n, req.stop, req.seed, req.logprobs) == (
        0.5, 0.9, 7, 2, ["END"], 3, True)
    assert req.read_calls
    assert not parse_request(body(tool_choice="none")).read_calls


@pytest.mark.parametrize("extra, names", [
    ({"stream": True}, "stream"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tool_choice": {"type": "function", "function": {"name": "f"}}}, "tool_choice"),
    ({"top_logprobs": 2}, "top_logprobs"),
    ({"logit_bias": {"1": 5}}, "logit_bias"),
    ({"presence_penalty": 0.5}, "presence_penalty"),
    ({"response_format": {"type": "json_object"}}, "response_format"),
    ({"best_of": 2}, "best_of"),
    ({"temperature": 3}, "temperature"),
    ({"temperature": "hot"}, "temperature"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"n": 0}, "n"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "robot"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, "image_url"),
    ({"messages": [{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": "{"}}]}]},
     "not JSON"),
    ({"tools": [{"type": "retrieval"}]}, "tools[0]"),
])
def test_what_cannot_be_served_is_a_400_naming_it(extra, names):
    with pytest.raises(RequestError) as info:
        parse_request(body(**extra))
    assert info.value.status == 400
    assert names in str(info.value) or names == info.value.param
    assert info.value.body()["error"]["message"] == str(info.value)


def test_a_reply_is_openai_s_chat_completion():
    out = completion_body("id1", "m", [
        Choice("thinking", [("call_1", "calculator", {"expression": "2+3"})], "tool_calls", [("<", -0.5)]),
        Choice("5", [], "stop"),
    ], prompt_tokens=10, completion_tokens=4)
    first, second = out["choices"]
    assert first["message"]["tool_calls"][0]["function"] == {"name": "calculator", "arguments": '{"expression": "2+3"}'}
    assert json.loads(first["message"]["tool_calls"][0]["function"]["arguments"]) == {"expression": "2+3"}
    assert first["finish_reason"] == "tool_calls" and first["logprobs"]["content"][0]["logprob"] == -0.5
    assert second["message"] == {"role": "assistant", "content": "5"} and second["logprobs"] is None
    assert out["usage"] == {"prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14}
