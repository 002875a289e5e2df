"""Deadlines met under Python 3.10 (declared supported), where ``asyncio.wait_for`` raises
``asyncio.TimeoutError``, a class of its own, not the builtin ``TimeoutError`` it is from 3.11
on: an ``except TimeoutError`` alone lets it through (a harness deadline failed the rollout, a
504 became a 500). These run 3.10's behaviour on any Python: ``asyncio.TimeoutError`` and
``asyncio.wait_for`` replaced by a class outside the builtin's and a wait that raises it."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest


class Py310Timeout(Exception):
    """``asyncio.TimeoutError`` as Python 3.10 has it: not a ``TimeoutError``."""


@pytest.fixture
def python310_wait_for(monkeypatch):
    async def wait_for(awaitable, timeout):
        if asyncio.iscoroutine(awaitable):
            awaitable.close()
        else:
            asyncio.ensure_future(awaitable).cancel()
        raise Py310Timeout()

    monkeypatch.setattr(asyncio, "TimeoutError", Py310Timeout)
    monkeypatch.setattr(asyncio, "wait_for", wait_for)
    assert not issubclass(asyncio.TimeoutError, TimeoutError)


def test_an_engine_past_request_timeout_is_a_504(python310_wait_for):
    from agentfly.rollout.endpoint.openai_api import RequestError
    from agentfly.rollout.endpoint.service import ChatService

    class Engine:
        async def generate(self, prompts, sampling):
            return [[]]

    service = ChatService(engine=Engine(), tokenizer=None, template=None, agent=None, model_name="m",
                          sampling=None, max_model_len=64, request_timeout=2.0)
    with pytest.raises(RequestError, match="within 2 s") as caught:
        asyncio.run(service._generate([1, 2], None))
    assert caught.value.status == 504


def test_a_harness_function_past_its_deadline_fails_its_chain(python310_wait_for):
    from agentfly.rollout.harness import Harness, HarnessFailure, HarnessLoop

    async def program(task, client):
        return "never"

    me = SimpleNamespace(harness=Harness(function="m:f", timeout=3.0), _function=program, _http=None)
    with pytest.raises(HarnessFailure, match="did not return within 3 s"):
        asyncio.run(HarnessLoop._run_function(me, {}, "http://127.0.0.1:9/v1", "key"))


def test_an_engine_call_past_its_deadline_loses_that_engine(python310_wait_for):
    pytest.importorskip("ray")
    import concurrent.futures

    from agentfly.rollout.engines.actors import Deadlines, EngineTimeoutError, RayEngines

    class Ref:
        def future(self):
            return concurrent.futures.Future()

    host = SimpleNamespace(generate=SimpleNamespace(remote=lambda *a: Ref()))
    engines = RayEngines.__new__(RayEngines)
    engines.hosts, engines.lost, engines.deadlines = [host], {}, Deadlines()
    with pytest.raises(EngineTimeoutError, match="engine 0 did not finish generate"):
        asyncio.run(engines.call(0, "generate", [[1]]))
    assert 0 in engines.lost
