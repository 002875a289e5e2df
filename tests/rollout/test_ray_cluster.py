"""The engine pool joins an existing Ray cluster named by RAY_ADDRESS (as AgentFly's scripts start
one with `ray start --head`) instead of starting its own."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

RAY = Path(sys.executable).with_name("ray")


def start_head(env: dict[str, str], temp: str) -> tuple[subprocess.Popen, str]:
    """`ray start --head --block` in its own process group; returns it and the join address.

    Stopping it with SIGTERM to that group ends only this cluster (`ray stop` would end every
    Ray on the machine, other users' included)."""
    log = open(os.path.join(temp, "head.log"), "w+")  # noqa: SIM115 - closed with the process
    # No drain on SIGTERM: the group's SIGTERM stops the GCS too, so Ray's drain request (for
    # Serve's proxies) could only time out, after RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S (30 s).
    proc = subprocess.Popen(
        [str(RAY), "start", "--head", "--block", "--num-cpus=2", "--port=0",
         f"--temp-dir={temp}", "--include-dashboard=false"],
        stdout=log, stderr=subprocess.STDOUT, env={**env, "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"},
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        log.seek(0)
        found = re.search(r"--address='([^']+)'", log.read())
        if found:
            return proc, found.group(1)
        if proc.poll() is not None:
            break
        time.sleep(0.5)
    log.seek(0)
    stop_head(proc)
    raise AssertionError(f"ray start did not come up:\n{log.read()[-2000:]}")


def stop_head(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(proc.pid, signal.SIGKILL)


@pytest.mark.slow
def test_pool_joins_the_cluster_in_ray_address(tmp_path):
    if not RAY.exists():
        pytest.skip("the ray command is not installed beside this python")
    from agentfly.models.tiny import build_tiny_model

    model = build_tiny_model(tmp_path / "m")
    temp = tempfile.mkdtemp(prefix="rayc", dir="/tmp")
    # no auth token: a token file of another Ray on this machine must not get in the way
    env = {**os.environ, "RAY_TMPDIR": temp, "RAY_AUTH_MODE": "disabled"}
    head, address = start_head(env, temp)
    code = f"""
import ray
from agentfly.rollout.engines import EnginePool, SamplingParams
from agentfly.rollout.engines.caller_thread import run_sync
pool = EnginePool("scripted", 1, engine_kwargs={{"model": {str(model)!r}, "script": ["hi"]}}, num_cpus_per_engine=0.5)
joined = ray.get_runtime_context().gcs_address
assert joined == {address!r}, f"joined {{joined}}, not the cluster at {address}"
out = run_sync(pool, pool.generate([[1, 2, 3]], SamplingParams(max_tokens=8)))
print("NODES", len(ray.nodes()), "TOKENS", len(out[0][0].token_ids))
pool.shutdown()
"""
    try:
        run = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=180,
            env={**env, "RAY_ADDRESS": address},
        )
        assert run.returncode == 0, run.stderr[-3000:]
        assert "NODES 1" in run.stdout and "TOKENS" in run.stdout
    finally:
        stop_head(head)
        shutil.rmtree(temp, ignore_errors=True)
