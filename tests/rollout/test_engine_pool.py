"""The engine pool: in-process and with two Ray actors on a local Ray."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import threading

import psutil
import pytest
from safetensors.torch import load_file

from agentfly.models.tiny import build_tiny_model
from agentfly.rollout.engines import EnginePool, SamplingParams
from agentfly.rollout.engines.caller_thread import run_sync
from agentfly.rollout.engines.transformers_engine import TransformersEngine

GREEDY = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    """Two tiny models with different weights (larger init so greedy outputs differ)."""
    root = tmp_path_factory.mktemp("pool_models")
    return (
        build_tiny_model(root / "a", initializer_range=0.2, seed=0),
        build_tiny_model(root / "b", initializer_range=0.2, seed=1),
    )


def _prompts(tokenizer) -> list[list[int]]:
    texts = ["<|im_start|>user\nWhat is 7*8?<|im_end|>\n", "hello world", "12+34"]
    return [tokenizer.encode(t) for t in texts]


def _greedy_ids(outputs) -> list[list[int]]:
    return [per_prompt[0].token_ids for per_prompt in outputs]


def test_local_pool_batches_concurrent_requests(model_dirs):
    a, b = model_dirs
    kwargs = {"model": a, "device": "cpu", "max_model_len": 64}
    pool = EnginePool("transformers", num_engines=0, engine_kwargs=kwargs)
    assert pool.backend == "local"
    prompts = _prompts(pool.tokenizer)
    expected = _greedy_ids(TransformersEngine(a, device="cpu").generate(prompts, GREEDY))

    async def run():
        return await asyncio.gather(*(pool.generate([p], GREEDY) for p in prompts))

    results = asyncio.run(run())
    assert [r[0][0].token_ids for r in results] == expected
    # three concurrent requests with equal parameters: fewer engine calls than requests
    assert pool.stats()[0]["requests"] < len(prompts)

    pool.update_weights(b)
    assert _greedy_ids(run_sync(pool, pool.generate(prompts, GREEDY))) == _greedy_ids(
        TransformersEngine(b, device="cpu").generate(prompts, GREEDY)
    )

    async def one_bad_request():
        too_long = [prompts[0] * 100]  # past max_model_len
        return await asyncio.gather(
            pool.generate(prompts[:1], GREEDY),
            pool.generate(too_long, GREEDY),
            pool.generate(prompts[1:], SamplingParams(n=2, max_tokens=3)),
            return_exceptions=True,
        )

    good, bad, other = asyncio.run(one_bad_request())
    assert isinstance(bad, ValueError) and "max_model_len" in str(bad)
    assert len(good) == 1 and [len(per) for per in other] == [2, 2]
    pool.shutdown()


def _scripted_pool(model_dir) -> EnginePool:
    """An in-process pool of the scripted engine (every turn: "ok")."""
    return EnginePool("scripted", num_engines=0, engine_kwargs={"model": model_dir, "script": ["ok"]})


def test_run_sync_generates_on_the_calling_thread(model_dirs):
    """The in-process engine runs on the thread that called run_sync (the training thread), the
    event loop on another; several chains' requests still reach the engine as one batch."""
    seen: dict[str, list[int]] = {"engine": [], "rows": []}
    pool = _scripted_pool(model_dirs[0])
    real = pool._hosts[0].engine.generate

    def generate(prompts, sampling):
        seen["engine"].append(threading.get_ident())
        seen["rows"].append(len(prompts))
        return real(prompts, sampling)

    pool._hosts[0].engine.generate = generate
    prompts = _prompts(pool.tokenizer)

    async def chains():
        seen["loop"] = [threading.get_ident()]
        return await asyncio.gather(*(pool.generate([p], GREEDY) for p in prompts))

    outputs = run_sync(pool, chains())
    here = threading.get_ident()
    assert seen["engine"] == [here] and seen["rows"] == [3]
    assert seen["loop"][0] != here
    assert [pool.tokenizer.decode(o[0][0].token_ids) for o in outputs] == ["ok<|im_end|>"] * 3
    # outside run_sync the engine runs on a daemon thread
    seen["engine"].clear()
    asyncio.run(pool.generate(prompts, GREEDY))
    assert seen["engine"] and seen["engine"][0] != here
    pool.shutdown()


def test_run_sync_errors_interrupts_and_nesting(model_dirs):
    pool = _scripted_pool(model_dirs[0])
    prompts = _prompts(pool.tokenizer)

    async def fails():
        await pool.generate(prompts, GREEDY)
        raise ValueError("chain bug")

    with pytest.raises(ValueError, match="chain bug"):
        run_sync(pool, fails())

    # per-prompt parameters are the engine's interface, not the pool's: refused at once (a
    # batching worker could not merge them, and every caller would wait forever)
    with pytest.raises(TypeError, match="one SamplingParams"):
        run_sync(pool, pool.generate(prompts, [GREEDY] * len(prompts)))

    # a second run_sync on a pool that is serving one (here from another thread) falls back to
    # the plain path instead of waiting for the busy thread: no deadlock
    async def nested():
        return await asyncio.to_thread(run_sync, pool, pool.generate(prompts[:1], GREEDY))

    assert len(run_sync(pool, nested())) == 1

    def interrupted(prompts, sampling):
        raise KeyboardInterrupt

    pool._hosts[0].engine.generate = interrupted

    async def chains():
        return await asyncio.gather(*(pool.generate([p], GREEDY) for p in prompts))

    with pytest.raises(KeyboardInterrupt):
        run_sync(pool, chains())
    assert not [t for t in threading.enumerate() if t.name == "agentfly-rollout-loop"]
    assert pool.in_process_calls.caller is None  # the pool serves the next rollout
    pool._hosts[0].engine.generate = lambda p, s: [["fine"] for _ in p]
    assert run_sync(pool, pool.generate(prompts, GREEDY)) == [["fine"]] * 3
    pool.shutdown()


def test_ray_pool_spreads_requests_and_updates_every_actor(model_dirs):
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        pytest.skip("a Ray instance is already running in this process")
    a, b = model_dirs
    temp_dir = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths
    pool = EnginePool(
        "transformers",
        num_engines=2,
        engine_kwargs={"model": str(a), "device": "cpu"},
        num_cpus_per_engine=1,
        max_batch_size=2,
        ray_init={"num_cpus": 2, "temp_dir": temp_dir, "log_to_driver": False},
    )
    try:
        prompts = _prompts(pool.tokenizer)
        reference = {
            str(d): _greedy_ids(TransformersEngine(d, device="cpu").generate(prompts, GREEDY)) for d in (a, b)
        }

        async def burst(n: int):
            sampling = SamplingParams(temperature=1.0, max_tokens=8)
            return await asyncio.gather(*(pool.generate(prompts, sampling) for _ in range(n)))

        results = asyncio.run(burst(8))
        assert all(len(r) == len(prompts) for r in results)
        stats = pool.stats()
        assert len({s["pid"] for s in stats}) == 2
        # the engines get the cores as the trainer does (not Ray's background niceness, 15)
        assert [psutil.Process(s["pid"]).nice() for s in stats] == [os.nice(0)] * 2
        assert all(s["requests"] > 0 for s in stats), stats  # both actors served requests

        async def on_each(sampling):
            return await asyncio.gather(
                *(pool.generate(prompts, sampling, engine=i) for i in range(2))
            )

        before = asyncio.run(on_each(GREEDY))
        assert [_greedy_ids(o) for o in before] == [reference[str(a)]] * 2

        pool.update_weights(load_file(b / "model.safetensors"))  # a state dict, via the store
        assert [s["weights_version"] for s in pool.stats()] == [1, 1]
        after = asyncio.run(on_each(GREEDY))
        assert [_greedy_ids(o) for o in after] == [reference[str(b)]] * 2

        pool.update_weights(a)  # a checkpoint directory, read by each actor
        assert [s["weights_version"] for s in pool.stats()] == [2, 2]
        again = asyncio.run(on_each(GREEDY))
        assert [_greedy_ids(o) for o in again] == [reference[str(a)]] * 2
    finally:
        pool.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)
    assert not ray.is_initialized()
