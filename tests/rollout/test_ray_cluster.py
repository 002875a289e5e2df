"""The engine pool joins an existing Ray cluster named by RAY_ADDRESS (as the seed scripts start
one with `ray start --head`) instead of starting its own."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

RAY = Path(sys.executable).with_name("ray")


@pytest.mark.slow
def test_pool_joins_the_cluster_in_ray_address(tmp_path):
    if not RAY.exists():
        pytest.skip("the ray command is not installed beside this python")
    from agentfly.testing import build_tiny_model

    model = build_tiny_model(tmp_path / "m")
    temp = tempfile.mkdtemp(prefix="rayc", dir="/tmp")
    # no auth token: a token file of another Ray on this machine must not get in the way
    env = {**os.environ, "RAY_TMPDIR": temp, "RAY_AUTH_MODE": "disabled"}
    start = subprocess.run(
        [str(RAY), "start", "--head", "--num-cpus=2", "--port=0", f"--temp-dir={temp}", "--include-dashboard=false"],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert start.returncode == 0, start.stderr[-2000:]
    # the address `ray start` prints for workers to join (not "auto": another Ray on this
    # machine could be the latest one)
    found = re.search(r"--address='([^']+)'", start.stdout + start.stderr)
    assert found, start.stdout[-2000:]
    address = found.group(1)
    code = f"""
import asyncio, ray
from agentfly.rollout.engines import EnginePool, SamplingParams
pool = EnginePool("scripted", 1, engine_kwargs={{"model": {str(model)!r}, "script": ["hi"]}}, num_cpus_per_engine=0.5)
joined = ray.get_runtime_context().gcs_address
assert joined == {address!r}, f"joined {{joined}}, not the cluster at {address}"
out = pool.generate_sync([[1, 2, 3]], SamplingParams(max_tokens=8))
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
        subprocess.run([str(RAY), "stop", "--force"], capture_output=True, env=env, timeout=120)
        shutil.rmtree(temp, ignore_errors=True)
