"""``agentfly serve``: the official ``openai`` client's ``chat.completions.create`` answered with and
without tools by the demo model, and a clear 400 (not a crash) for what is not supported."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import openai
import pytest

from agentfly.core.plugins import import_object
from agentfly.rollout.agents import get_agent
from agentfly.rollout.endpoint.http import ChatServer
from agentfly.rollout.endpoint.service import ChatService
from agentfly.rollout.engines.caller_thread import run_sync
from agentfly.rollout.templates import get_template

REPO = Path(__file__).resolve().parents[2]
TOOLS = import_object(f"{REPO / 'examples/harness/calculator_agent.py'}:TOOLS")
QUESTION = json.loads((REPO / "agentfly/demo/data/val.json").read_text())[0]["question"]


@pytest.fixture(scope="module")
def answers():
    """Every request of these tests, sent by the openai client to a server on the demo model."""
    from agentfly.rollout.engines import EnginePool
    from agentfly.rollout.engines.base import SamplingParams

    pool = EnginePool("transformers", 0, engine_kwargs={"model": str(REPO / "agentfly/demo/model"),
                                                        "device": "cpu", "seed": 0})
    tok = pool.tokenizer
    template = get_template("qwen2.5-no-system-tool", tok)
    service = ChatService(
        engine=pool, tokenizer=tok, template=template, agent=get_agent("hermes", []), model_name="demo",
        sampling=SamplingParams(temperature=0.0, max_tokens=24, stop=template.stop,
                                stop_token_ids=template.stop_token_ids(tok)),
        max_model_len=80,
    )
    user = [{"role": "user", "content": QUESTION}]

    async def session():
        import aiohttp

        server = ChatServer(service, api_key="sesame")
        url = await server.start()
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="sesame", max_retries=0)
        out = {"models": await client.models.list()}
        out["tools"] = await client.chat.completions.create(model="demo", messages=user, tools=TOOLS)
        out["plain"] = await client.chat.completions.create(model="demo", messages=user)
        out["sampled"] = await client.chat.completions.create(
            model="demo", messages=user, n=2, temperature=1.0, seed=3, logprobs=True, max_tokens=6)
        call = out["tools"].choices[0].message
        follow = [*user, call.model_dump(exclude_none=True),
                  {"role": "tool", "tool_call_id": call.tool_calls[0].id, "content": "123"}]
        out["follow"] = await client.chat.completions.create(model="demo", messages=follow, tools=TOOLS)
        refused = {}
        for name, kw in {"stream": {"stream": True}, "tool_choice": {"tool_choice": "required", "tools": TOOLS},
                         "top_logprobs": {"logprobs": True, "top_logprobs": 3},
                         "image": {"messages": [{"role": "user", "content": [
                             {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}]}]},
                         "too_long": {"messages": [{"role": "user", "content": "9 " * 200}]}}.items():
            try:
                await client.chat.completions.create(**{"model": "demo", "messages": user, **kw})
            except openai.APIStatusError as e:
                refused[name] = (e.status_code, str(e))
        wrong = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="wrong", max_retries=0)
        try:
            await wrong.models.list()
        except openai.AuthenticationError as e:
            refused["key"] = (e.status_code, str(e))
        async with aiohttp.ClientSession() as http, http.post(
            f"{url}/v1/chat/completions", data=b"{not json", headers={"Authorization": "Bearer sesame"}
        ) as r:
            refused["body"] = (r.status, await r.text())
        await client.close()
        await wrong.close()
        await server.stop()
        return out, refused

    try:
        yield run_sync(pool, session())
    finally:
        pool.shutdown()


def test_models_lists_the_served_model(answers):
    out, _ = answers
    assert [m.id for m in out["models"].data] == ["demo"]


def test_with_tools_the_reply_s_calls_are_read_by_the_parser(answers):
    out, _ = answers
    choice = out["tools"].choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.function.name == "calculator" and "expression" in json.loads(call.function.arguments)
    assert choice.message.content is None  # the <tool_call> block is the call, not text
    assert out["tools"].usage.prompt_tokens > 0 and out["tools"].usage.completion_tokens > 0
    # the program's tool result goes back and the model goes on (it answers with the answer tool)
    follow = out["follow"].choices[0].message
    assert follow.tool_calls and follow.tool_calls[0].function.name == "answer"


def test_without_tools_the_reply_is_text(answers):
    out, _ = answers
    choice = out["plain"].choices[0]
    assert choice.message.tool_calls is None and "<tool_call>" in choice.message.content
    assert choice.finish_reason in ("stop", "length")


def test_n_samples_and_their_log_probabilities(answers):
    out, _ = answers
    reply = out["sampled"]
    assert len(reply.choices) == 2
    for choice in reply.choices:
        assert len(choice.logprobs.content) >= 1 and all(t.logprob <= 0 for t in choice.logprobs.content)
    assert reply.usage.completion_tokens == sum(len(c.logprobs.content) for c in reply.choices)


def test_what_is_not_supported_is_a_clear_error_not_a_crash(answers):
    _, refused = answers
    assert refused["stream"][0] == 400 and "stream" in refused["stream"][1]
    assert refused["tool_choice"][0] == 400 and "constrained decoding" in refused["tool_choice"][1]
    assert refused["top_logprobs"][0] == 400
    assert refused["image"][0] == 400 and "image_url" in refused["image"][1]
    assert refused["too_long"][0] == 400 and "context" in refused["too_long"][1]
    assert refused["key"][0] == 401
    assert refused["body"][0] == 400 and "not JSON" in refused["body"][1]


def test_agentfly_serve_answers_until_sigterm():
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentfly.cli", "serve", "--config", "conf/examples/demo_calculator.yaml",
         "--port", "0", "trainer.num_threads=1"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        line = proc.stdout.readline()  # the server prints its URL once it listens
        match = re.search(r"(http://\S+/v1)", line)
        assert match, (line, proc.stderr.read() if proc.poll() is not None else "")
        client = openai.OpenAI(base_url=match.group(1), api_key="none", max_retries=0, timeout=60)
        reply = client.chat.completions.create(model="model", messages=[{"role": "user", "content": QUESTION}],
                                               tools=TOOLS, temperature=0)
        assert reply.choices[0].message.tool_calls[0].function.name == "calculator"
        proc.send_signal(signal.SIGTERM)
        began = time.monotonic()
        assert proc.wait(timeout=60) in (0, 143, -signal.SIGTERM)
        assert time.monotonic() - began < 60
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()



def test_agentfly_serve_on_a_taken_port_says_so_in_one_line():
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "agentfly.cli", "serve", "--config", "conf/examples/demo_calculator.yaml",
             "--port", str(port), "trainer.num_threads=1"],
            cwd=REPO, capture_output=True, text=True, timeout=120,
        )
    assert done.returncode == 2, done.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr and "--port 0" in done.stderr
    assert "Traceback" not in done.stderr
