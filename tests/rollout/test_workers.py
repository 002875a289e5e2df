"""The worker pool that runs sync tools and rewards: deadlines that end calls, deaths that are
failures, memory and output limits, no thread or process left behind."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from agentfly.core.plugins import load_plugins
from agentfly.core.trajectory import Trajectory
from agentfly.rollout.execution.workers import WorkerPool, WorkerStartError, default_num_workers
from agentfly.rollout.rewards import acompute_reward, compute_reward, get_reward, reward
from agentfly.rollout.rollout_plan import RolloutPlan
from agentfly.rollout.runner import worker_pool
from agentfly.rollout.summary import summarize
from agentfly.rollout.tools import get_tool, tool
from agentfly.rollout.tools.call import run_tool_call


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def _children() -> list[int]:
    """Live child processes of this process."""
    me, out = os.getpid(), []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == me and fields[0] != "Z":
                out.append(int(entry))
    return out


def _status(field: str) -> int:
    """A ``/proc/self/status`` figure in kB (``VmRSS``, ``VmHWM``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _wait_started(pool: WorkerPool, workers: int) -> None:
    """Start ``pool`` and wait until ``workers`` of its workers are up and idle."""
    pool.start()
    deadline = time.monotonic() + 60
    while sum(w.state == "idle" for w in pool._workers) < workers:
        assert time.monotonic() < deadline, f"{workers} workers did not start within 60 s"
        time.sleep(0.05)


@tool(name="test_workers_hangs", timeout=1.0)
def _hangs() -> str:
    """Never returns."""
    while True:
        time.sleep(60)


@tool(name="test_workers_hangs_long", timeout=4.0)
def _hangs_long() -> str:
    """Never returns; its deadline leaves a slow machine time to start another worker."""
    while True:
        time.sleep(60)


@tool(name="test_workers_pid")
def _pid() -> str:
    """The process it runs in."""
    return str(os.getpid())


@tool(name="test_workers_waits", io_bound=True)
def _waits() -> str:
    """Waits on a service (here: sleeps)."""
    time.sleep(0.1)
    return "done"


@tool(name="test_workers_exits")
def _exits(code: int) -> str:
    """Ends its process at once.

    Args:
        code: the exit code.
    """
    os._exit(code)


@tool(name="test_workers_segfaults")
def _segfaults() -> str:
    """Reads address 0."""
    import ctypes

    return str(ctypes.string_at(0))


@tool(name="test_workers_allocates", timeout=20.0)
def _allocates(gib: int) -> str:
    """Allocates memory and touches it.

    Args:
        gib: how much, in GiB.
    """
    return str(len(bytearray(gib * 2**30)))


@tool(name="test_workers_floods", max_output_chars=1000)
def _floods() -> str:
    """Returns 100 MB of text."""
    return "y" * (100 * 2**20)


@reward(name="test_workers_hung_reward", timeout=0.5)
def _hung_reward(prediction: str) -> float:
    while True:
        time.sleep(60)


@reward(name="test_workers_huge_reward")
def _huge_reward(prediction: str) -> float:
    return 1e308


@reward(name="test_workers_huge_extra")
def _huge_extra(prediction: str) -> dict:
    return {"reward": 1.0, "score": -1e308}


def test_hung_tools_time_out_at_their_deadline_and_later_calls_run():
    """4 calls of a tool that never returns on 2 workers: each is a timeout after running its
    own 1 s (one wave: a call idle on the CPU lends its place, so the other two start beside
    the first two), the rollout's ``asyncio.run`` returns, a fast call afterwards runs in a
    (new) worker, and closing the pool leaves no process."""
    others = set(_children())  # other pools' workers (the default pool of earlier tests)
    pool = WorkerPool(2, start_timeout=30)

    async def rollout() -> list:
        return await asyncio.gather(
            *(run_tool_call("test_workers_hangs", {}, workers=pool) for _ in range(4))
        )

    start = time.monotonic()
    results = asyncio.run(rollout())
    elapsed = time.monotonic() - start
    assert 1.0 <= elapsed < 1.0 + 3.0  # asyncio.run waited on nothing stuck
    for result in results:
        assert not result.ok and result.error == "timeout", result
    assert pool.stats["timed_out"] == 4  # every one ran, and had its worker killed
    fast = asyncio.run(run_tool_call("test_workers_pid", {}, workers=pool))
    assert fast.ok and int(fast.observation) != os.getpid()
    pids = pool.pids()
    pool.close()
    assert pids and not any(_alive(p) for p in pids)
    assert set(_children()) <= others


def test_a_tool_whose_calls_hang_never_keeps_another_tool_from_running():
    """2 hanging calls hold both workers of the pool for 4 s; calls of another tool submitted
    meanwhile run on a worker beyond the two and are done before the hung calls end. (Each side
    starts its workers itself, so a slow machine delays both alike.) Both workers are up before
    the hung calls come, so that both hung calls run at once however slowly workers start; they
    have this module imported (as a run's workers have its plug-ins), so that no worker's
    first call imports it. No place is lent (``max_lent=0``): the fair queue alone holds for
    calls that hang computing, which lend nothing."""
    with WorkerPool(2, preload=[_pid.fn.__module__], max_lent=0) as pool:
        _wait_started(pool, 2)

        async def hung() -> tuple[float, object]:
            result = await run_tool_call("test_workers_hangs_long", {}, workers=pool)
            return time.monotonic(), result

        async def healthy() -> tuple[float, object]:
            await asyncio.sleep(0.1)  # the hung calls are in first
            result = await run_tool_call("test_workers_pid", {}, workers=pool)
            return time.monotonic(), result

        async def rollout() -> list:
            return await asyncio.gather(*(hung() for _ in range(2)), *(healthy() for _ in range(3)))

        *hung_ends, a, b, c = asyncio.run(rollout())
        assert all(r.error == "timeout" for _, r in hung_ends)
        assert all(result.ok for _, result in (a, b, c)), (a, b, c)
        # not behind the hung calls: with the pool's two workers only, they would have to wait
        # for the hung calls to time out
        assert max(end for end, _ in (a, b, c)) < min(end for end, _ in hung_ends)


def test_a_worker_that_exits_is_a_counted_failure_and_the_next_call_runs():
    with WorkerPool(1) as pool:
        died = asyncio.run(run_tool_call("test_workers_exits", {"code": 3}, workers=pool))
        assert not died.ok and died.error == "worker_died"
        assert "exit code 3" in died.observation
        crashed = asyncio.run(run_tool_call("test_workers_segfaults", {}, workers=pool))
        assert not crashed.ok and crashed.error == "worker_died"
        assert "SIGSEGV" in crashed.observation
        after = asyncio.run(run_tool_call("test_workers_pid", {}, workers=pool))
        assert after.ok and int(after.observation) != os.getpid()
        assert pool.stats["died"] == 2


def test_an_allocation_past_the_limit_fails_in_the_worker_not_the_trainer():
    """6 GiB against the 4 GiB default: a MemoryError in the worker; this process's peak
    resident memory does not move."""
    with WorkerPool(1) as pool:
        asyncio.run(run_tool_call("test_workers_pid", {}, workers=pool))  # started
        peak, rss = _status("VmHWM"), _status("VmRSS")
        result = asyncio.run(run_tool_call("test_workers_allocates", {"gib": 6}, workers=pool))
        assert not result.ok and result.error == "exception"
        assert "MemoryError" in result.observation
        assert _status("VmHWM") - peak < 64 * 1024  # kB
        assert _status("VmRSS") - rss < 64 * 1024
        again = asyncio.run(run_tool_call("test_workers_pid", {}, workers=pool))
        assert again.ok  # the same worker goes on


def test_a_huge_output_is_cut_in_the_worker_before_the_pipe():
    with WorkerPool(1) as pool:
        result = asyncio.run(run_tool_call("test_workers_floods", {}, workers=pool))
        assert result.ok and result.observation.startswith("y" * 1000 + "\n")
        assert f"{100 * 2**20 - 1000} more characters" in result.observation
        assert pool.stats["largest_reply_bytes"] < 10_000  # the 100 MB never crossed


def test_a_reply_over_the_cap_never_crosses_the_pipe():
    with WorkerPool(1, max_reply_bytes=100_000) as pool:
        future = pool.submit(bytes, (10_000_000,), timeout=10)
        with pytest.raises(Exception, match="over the 100000-byte reply cap"):
            future.result()
        assert pool.stats["largest_reply_bytes"] < 100_000


def test_hung_rewards_time_out_without_leaving_threads_or_processes():
    with WorkerPool(2) as pool:

        async def score(n: int) -> list:
            calls = (acompute_reward("test_workers_hung_reward", "p", workers=pool) for _ in range(n))
            return await asyncio.gather(*calls)

        asyncio.run(score(2))  # the pool's own thread and workers exist now
        threads, others = threading.active_count(), set(_children()) - set(pool.pids())
        results = asyncio.run(score(4)) + asyncio.run(score(4))
        assert all(r.failed and r.kind == "timeout" for r in results)
        assert threading.active_count() <= threads
        assert len(set(_children()) - others) <= pool.num_workers


def test_a_reward_beyond_float32_is_malformed_and_named():
    huge = compute_reward("test_workers_huge_reward", "p")
    assert huge.failed and huge.reward == 0.0 and huge.kind == "malformed"
    assert "test_workers_huge_reward" in huge.error and "1e+308" in huge.error
    extra = compute_reward("test_workers_huge_extra", "p")
    assert extra.failed and extra.kind == "malformed"
    assert "test_workers_huge_extra" in extra.error and "'score'" in extra.error
    largest = compute_reward(lambda prediction: 3.4e38, "p")  # float32's range holds it
    assert not largest.failed and largest.reward == 3.4e38


def test_failures_are_counted_by_kind_as_numbers_to_log():
    def traj(reward_error: str | None) -> Trajectory:
        t = Trajectory(prompt_ids=[1], finish_reason="answer", reward=0.0)
        t.reward_failed, t.reward_error = reward_error is not None, reward_error
        return t

    summary = summarize([traj("timeout"), traj("timeout"), traj("malformed"), traj(None)])
    assert summary["failures/reward_kinds"] == {"timeout": 2, "malformed": 1}
    assert summary["failures/reward_kinds/timeout"] == 2
    assert summary["failures/reward_kinds/malformed"] == 1
    assert summary["finish_reasons/answer"] == 4  # chains by finish reason, likewise


def test_tools_and_rewards_from_a_plugin_file_run_in_the_pool(tmp_path):
    plugin = tmp_path / "my_worker_plugin.py"
    plugin.write_text(textwrap.dedent('''
        import os
        from agentfly.rollout.rewards import reward
        from agentfly.rollout.tools import tool

        TABLE = {"answer": 42}

        @tool(name="test_workers_plugin_tool")
        def plugin_tool(key: str) -> str:
            """Looks a key up.

            Args:
                key: the key.
            """
            return f"{TABLE[key]} from {os.getpid()}"

        @reward(name="test_workers_plugin_reward")
        def plugin_reward(prediction: str, parent: int) -> float:
            return float(os.getpid() != parent)
    '''))
    load_plugins([str(plugin)])
    with WorkerPool(1, plugins=[str(plugin)]) as pool:
        result = asyncio.run(
            run_tool_call(get_tool("test_workers_plugin_tool"), {"key": "answer"}, workers=pool)
        )
        assert result.ok and result.observation.startswith("42 from ")
        assert int(result.observation.split()[-1]) in pool.pids()
        scored = compute_reward(
            get_reward("test_workers_plugin_reward"), "p", row={"parent": os.getpid()},
            workers=pool,
        )
        assert not scored.failed and scored.reward == 1.0


def test_a_worker_that_cannot_start_names_what_failed(tmp_path):
    broken = tmp_path / "broken_plugin.py"
    broken.write_text("import sys\nprint('plugin-marker-77', file=sys.stderr)\nraise ValueError('no')\n")
    with WorkerPool(1, plugins=[str(broken)]) as pool:
        future = pool.submit(os.getpid, timeout=30)
        with pytest.raises(WorkerStartError) as err:
            future.result(30)
    assert "broken_plugin.py" in str(err.value) and "ValueError" in str(err.value)


def test_a_worker_that_never_starts_is_tried_three_times_then_names_the_deadline(tmp_path):
    """A plug-in whose import never ends: starts with deadlines of 0.5, 1 and 2 s (each late
    start tried again with twice the deadline), then the pool gives up, saying so; 3.5 s of
    deadlines in all."""
    slow = tmp_path / "slow_plugin.py"
    slow.write_text("import time\ntime.sleep(30)\n")
    with WorkerPool(1, plugins=[str(slow)], start_timeout=0.5) as pool:
        start = time.monotonic()
        future = pool.submit(os.getpid, timeout=30)
        with pytest.raises(WorkerStartError, match=r"within 2 s \(3 late or dead starts in a row"):
            future.result(30)
        assert 0.5 + 1 + 2 <= time.monotonic() - start < 0.5 + 1 + 2 + 3.0
        with pytest.raises(WorkerStartError):  # said again, not waited for again
            pool.submit(os.getpid, timeout=30).result(1)


def test_a_queued_call_s_deadline_starts_when_a_worker_takes_it():
    """A 0.5 s call queued behind a 1 s one waits 1 s for the worker, then runs and succeeds
    (no place lent: the sleeping call keeps its worker)."""
    with WorkerPool(1, max_lent=0) as pool:
        pool.submit(time.sleep, (1.0,), timeout=10)
        short = pool.submit(os.getpid, timeout=0.5)
        assert short.result(10) in pool.pids()
        assert pool.stats["longest_wait_s"] >= 0.9


def test_a_call_that_waits_past_the_queue_bound_fails_as_the_pool_too_small():
    """One worker, a queue bound of 0.3 s: the second call of a hanging tool never runs and
    fails as ``queue_timeout`` at 0.3 s, naming the pool's size; a reward likewise (no place
    lent: the hanging call keeps its worker)."""
    with WorkerPool(1, queue_timeout=0.3, max_lent=0) as pool:
        _wait_started(pool, 1)  # no call waits for a start

        async def calls() -> list:
            return await asyncio.gather(
                *(run_tool_call("test_workers_hangs", {}, workers=pool) for _ in range(2))
            )

        start = time.monotonic()
        ran, waited = asyncio.run(calls())
        assert ran.error == "timeout" and waited.error == "queue_timeout"
        assert "num_workers=1" in waited.observation and "too small" in waited.observation
        assert time.monotonic() - start < 1.0 + 1.5
        assert pool.stats["queue_timed_out"] == 1

        async def scores() -> list:
            calls = (acompute_reward("test_workers_hung_reward", "p", workers=pool) for _ in range(2))
            return await asyncio.gather(*calls)

        kinds = sorted(r.kind for r in asyncio.run(scores()))
        assert kinds == ["queue_timeout", "timeout"]


def test_a_started_pool_keeps_a_spare_so_a_dead_worker_is_not_waited_for():
    """One worker and one spare: a started pool runs both, idle; after a call kills its worker,
    the next call runs on a worker that was already running (the spare), and the dead one's
    replacement is started at once (3 started in all)."""
    with WorkerPool(1, spares=1) as pool:
        _wait_started(pool, 1)
        time.sleep(0.5)  # the spare is forked beside the first worker: up by now
        assert len(pool.pids()) == 2 and pool.stats["started"] == 2
        running = set(pool.pids())
        died = pool.submit(os._exit, (3,), timeout=30)
        with pytest.raises(Exception, match="died"):
            died.result(30)
        assert pool.submit(os.getpid, timeout=30).result(30) in running
        assert pool.stats["started"] == 3


def test_a_late_start_is_tried_again_and_the_pool_goes_on(tmp_path, caplog):
    """A plug-in whose first import takes 3 s (a loaded machine), start_timeout 1 s: the first
    start misses its deadline and is tried again with 2 s, which the second import (quick)
    meets; the call runs, and the warning says so."""
    marker = tmp_path / "imported_once"
    slow = tmp_path / "slow_once_plugin.py"
    slow.write_text(
        "import pathlib, time\n"
        f"marker = pathlib.Path({str(marker)!r})\n"
        "if not marker.exists():\n"
        "    marker.touch()\n"
        "    time.sleep(3)\n"
    )
    with caplog.at_level("WARNING"), WorkerPool(1, plugins=[str(slow)], start_timeout=1.0) as pool:
        assert pool.submit(os.getpid, timeout=30).result(60) in pool.pids()
    assert any(
        "did not report ready within 1 s); trying again with a 2 s deadline" in r.getMessage()
        for r in caplog.records
    )


def test_the_default_pool_size_follows_the_cores_or_the_calls_in_flight():
    cores = default_num_workers()
    assert 2 <= cores <= 8
    assert default_num_workers(io_bound=True, calls_in_flight=40) == max(cores, 40)
    assert default_num_workers(io_bound=True, calls_in_flight=1000) == 64
    assert default_num_workers(io_bound=True, calls_in_flight=1) == cores


def test_a_run_s_pool_has_a_worker_per_chain_in_flight_for_a_tool_that_waits():
    """The run's pool (:func:`worker_pool`): 12 chains in flight, an ``io_bound`` tool gets 12
    workers, one that computes the cores' count, and ``num_workers`` set wins."""
    plan = RolloutPlan(
        engine="scripted", num_engines=0, engine_kwargs={}, pool_kwargs={}, agent_type="hermes",
        tool_parser=None, system_prompt=None, tools=[], tool_config={}, reward=None,
        template=None, resource_backend="local", plugins=[], loop={},
        workers={"num_workers": None}, chains_in_flight=12,
    )
    for tool_name, settings, size in [
        ("test_workers_waits", {"num_workers": None}, max(default_num_workers(), 12)),
        ("test_workers_pid", {"num_workers": None}, default_num_workers()),
        ("test_workers_waits", {"num_workers": 3}, 3),
    ]:
        with worker_pool(dataclasses.replace(plan, workers=settings), [get_tool(tool_name)]) as pool:
            assert pool.num_workers == size


def test_close_kills_a_stuck_call_at_once():
    pool = WorkerPool(1)
    future = pool.submit(time.sleep, (60,), timeout=60)
    while not pool.pids() or not future.running():
        time.sleep(0.02)
    pid = pool.pids()[0]
    start = time.monotonic()
    pool.close()
    assert time.monotonic() - start < 1.5
    with pytest.raises(Exception, match="closed"):
        future.result(1)
    assert not _alive(pid)


def test_workers_die_with_the_trainer(tmp_path):
    """The trainer SIGKILLed: its worker (and what the worker started) goes too."""
    script = tmp_path / "trainer.py"
    script.write_text(textwrap.dedent('''
        import os, signal, subprocess, sys
        from agentfly.rollout.execution.workers import WorkerPool

        def start_child():
            child = subprocess.Popen(["sleep", "60"])
            return f"{os.getpid()} {child.pid}"

        pool = WorkerPool(1)
        print(pool.submit(start_child, timeout=30).result(30), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    '''))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, env=env
    )
    worker, grandchild = map(int, out.stdout.split())
    deadline = time.monotonic() + 5
    while (_alive(worker) or _alive(grandchild)) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert not _alive(worker) and not _alive(grandchild)
    finally:  # what a failure would leave
        for pid in (worker, grandchild):
            if _alive(pid):
                os.kill(pid, 9)
