"""Per-chain resources: made on first use, capped per tool, released at chain end or failure."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator

import pytest

from agentfly.rollout.tools import run_tool_call, tool
from agentfly.rollout.tools.resources import ChainResources, ResourcePool


class Notebook:
    """A fake resource that records how many exist at once."""

    alive = 0
    peak = 0
    made = 0
    closed = 0

    def __init__(self) -> None:
        Notebook.alive += 1
        Notebook.made += 1
        Notebook.peak = max(Notebook.peak, Notebook.alive)
        self.lines: list[str] = []

    def close(self) -> None:
        Notebook.alive -= 1
        Notebook.closed += 1

    @classmethod
    def reset(cls) -> None:
        cls.alive = cls.peak = cls.made = cls.closed = 0


@tool(name="test_res_note", stateful=True, resource_factory=Notebook, max_resources=2)
def note(line: str, resource: Notebook) -> str:
    """Append a line to the chain's notebook and show it.

    Args:
        line: the line to append.
    """
    resource.lines.append(line)
    return " | ".join(resource.lines)


@pytest.fixture(autouse=True)
def reset_notebooks() -> None:
    Notebook.reset()


def test_a_chain_reuses_its_resource_and_releases_it() -> None:
    async def main() -> list[str]:
        pool = ResourcePool()
        async with pool.chain("c1") as chain:
            first = await chain.get("test_res_note")
            assert await chain.get("test_res_note") is first
            out = [
                (await run_tool_call("test_res_note", {"line": "a"}, resource=chain)).observation,
                (await run_tool_call("test_res_note", {"line": "b"}, resource=chain)).observation,
            ]
            assert chain.held == ["test_res_note"] and pool.live("test_res_note") == 1
        assert pool.live("test_res_note") == 0
        return out

    assert asyncio.run(main()) == ["a", "a | b"]
    assert (Notebook.made, Notebook.closed) == (1, 1)


def test_cap_per_tool_is_respected_across_many_chains() -> None:
    async def one_chain(pool: ResourcePool, i: int) -> str:
        async with pool.chain(i) as chain:
            await run_tool_call("test_res_note", {"line": str(i)}, resource=chain)
            await asyncio.sleep(0.05)
            result = await run_tool_call("test_res_note", {"line": "end"}, resource=chain)
            return result.observation

    async def main() -> list[str]:
        pool = ResourcePool(max_per_tool=10)  # the tool's own max_resources=2 wins
        return await asyncio.gather(*(one_chain(pool, i) for i in range(6)))

    observations = asyncio.run(main())
    assert observations == [f"{i} | end" for i in range(6)]  # no chain saw another's lines
    assert Notebook.peak == 2
    assert Notebook.made == Notebook.closed == 6 and Notebook.alive == 0


@pytest.mark.needs_bwrap
def test_pool_wide_cap() -> None:
    async def main() -> int:
        pool = ResourcePool(max_per_tool=1)

        async def hold(i: int) -> None:
            async with pool.acquire("code_interpreter", i):
                await asyncio.sleep(0.05)
                assert pool.live("code_interpreter") == 1

        await asyncio.gather(*(hold(i) for i in range(3)))
        return pool.live("code_interpreter")

    assert asyncio.run(main()) == 0


def test_resources_are_released_when_the_chain_fails() -> None:
    async def main() -> None:
        pool = ResourcePool()
        with pytest.raises(RuntimeError, match="chain crashed"):
            async with pool.chain("bad") as chain:
                await chain.get("test_res_note")
                raise RuntimeError("chain crashed")
        assert pool.live("test_res_note") == 0

    asyncio.run(main())
    assert Notebook.made == Notebook.closed == 1


def test_resources_are_released_when_the_chain_is_cancelled() -> None:
    async def main() -> None:
        pool = ResourcePool()
        started = asyncio.Event()

        async def chain_task() -> None:
            async with pool.chain("slow") as chain:
                await chain.get("test_res_note")
                started.set()
                await asyncio.sleep(30)

        task = asyncio.create_task(chain_task())
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert pool.live("test_res_note") == 0

    asyncio.run(main())
    assert Notebook.made == Notebook.closed == 1


def test_release_all_is_idempotent_and_the_chain_can_start_again() -> None:
    async def main() -> None:
        chain = ChainResources(ResourcePool(), "x")
        first = await chain.get("test_res_note")
        await chain.release_all()
        await chain.release_all()
        second = await chain.get("test_res_note")
        assert second is not first
        await chain.release_all()

    asyncio.run(main())
    assert Notebook.made == Notebook.closed == 2


def test_bad_pool_arguments() -> None:
    with pytest.raises(ValueError, match="unknown resource backend"):
        ResourcePool("kubernetes")
    with pytest.raises(ValueError, match="at least 1"):
        ResourcePool(max_per_tool=0)

    async def stateless() -> None:
        async with ResourcePool().acquire("calculator", 0):
            pass

    with pytest.raises(ValueError, match="not stateful"):
        asyncio.run(stateless())


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    ray = pytest.importorskip("ray")
    assert not ray.is_initialized(), "another test left Ray running"
    temp_dir = tempfile.mkdtemp(prefix="ray-res-")  # short: Ray's socket paths have a length limit
    ray.init(
        num_cpus=2,
        _temp_dir=temp_dir,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
    )
    yield
    ray.shutdown()
    shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.mark.slow
def test_ray_backend_holds_each_session_in_an_actor(local_ray: None) -> None:
    import ray

    async def main() -> tuple:
        pool = ResourcePool("ray", max_per_tool=3)
        async with pool.chain("a") as a, pool.chain("b") as b:
            await run_tool_call("code_interpreter", {"code": "n = 5"}, resource=a)
            same = await run_tool_call("code_interpreter", {"code": "n * 3"}, resource=a)
            other = await run_tool_call("code_interpreter", {"code": "n"}, resource=b)
            proxy = await a.get("code_interpreter")
            assert pool.live("code_interpreter") == 2
        return same, other, proxy, pool.live("code_interpreter")

    same, other, proxy, live_after = asyncio.run(main())
    assert same.ok and same.observation == "15"
    assert "NameError" in other.observation
    assert live_after == 0
    # Released with the chain: the session was closed and its actor killed (whichever the call
    # meets first, it fails).
    with pytest.raises(ray.exceptions.RayError):
        proxy.run("1")


@pytest.mark.slow
@pytest.mark.needs_bwrap
def test_ray_resource_waits_have_deadlines(local_ray: None) -> None:
    """A resource actor whose factory never returns, and a method call that never returns, each
    end with a TimeoutError naming the tool and the setting, well before the hang would end."""
    import functools
    import threading
    import time

    import ray

    hung = ResourcePool("ray", factories={"code_interpreter": functools.partial(time.sleep, 120)},
                        ready_timeout_s=1.0)
    start = time.monotonic()
    with pytest.raises(TimeoutError, match=r"code_interpreter resource did not come up within 1 s "
                                           r"\(ResourcePool ready_timeout_s\)"):
        asyncio.run(hung.chain("a").get("code_interpreter"))
    assert time.monotonic() - start < 60  # the factory sleeps 120 s: the deadline ended the wait

    # an Event's wait() without a timeout never returns
    stuck = ResourcePool("ray", factories={"code_interpreter": threading.Event}, call_timeout_s=1.0)

    async def call_wait() -> None:
        async with stuck.chain("b") as chain:
            event = await chain.get("code_interpreter")
            with pytest.raises(TimeoutError, match=r"code_interpreter resource's wait\(\) did not "
                                                   r"return within 1 s \(ResourcePool call_timeout_s\)"):
                await asyncio.to_thread(event.wait)
            with pytest.raises(ray.exceptions.RayActorError):  # killed: nothing waits on it again
                event.is_set()

    start = time.monotonic()
    asyncio.run(call_wait())
    assert time.monotonic() - start < 25  # neither the call nor the release waited 30 s


def _never_made() -> None:
    threading.Event().wait()  # a resource factory that never returns


@tool(name="test_res_hung_factory", stateful=True, resource_factory=_never_made, timeout=0.5)
def _uses_hung(resource: object) -> str:
    return "unreachable"


def test_a_factory_that_never_returns_is_a_timeout_and_the_rollout_ends():
    """The resource is made on the package's daemon threads under the tool's timeout: the call
    fails as a timeout and ``asyncio.run`` returns (asyncio's executor would wait on it)."""

    async def chain() -> object:
        async with ResourcePool().chain(("hung", 0)) as resources:
            return await run_tool_call("test_res_hung_factory", {}, resource=resources)

    start = time.monotonic()
    result = asyncio.run(chain())
    assert not result.ok and result.error == "timeout", result
    assert "test_res_hung_factory" in result.observation
    assert time.monotonic() - start < 0.5 + 2.0  # the deadline, not forever
