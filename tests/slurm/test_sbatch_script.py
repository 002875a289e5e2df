"""examples/slurm/train.sbatch: valid bash with the documented #SBATCH lines and `srun agentfly
fit` line; and a run on the private SLURM cluster (tests/slurm/cluster.py) with the real `ray`
and a stand-in for `agentfly fit` (tests/slurm/fake_agentfly.py) until the real trainer run is
tested here."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.slurm.cluster import SlurmCluster, free_port

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "slurm" / "train.sbatch"
RAY = Path(sys.executable).with_name("ray")


def sbatch_options() -> dict[str, str]:
    """The script's ``#SBATCH --key[=value]`` lines."""
    options = {}
    for line in SCRIPT.read_text().splitlines():
        found = re.match(r"#SBATCH\s+--([\w-]+)(?:=(\S+))?", line)
        if found:
            options[found.group(1)] = found.group(2) or ""
    return options


def test_script_is_valid_bash():
    bash = shutil.which("bash")
    assert bash, "bash is not installed"
    result = subprocess.run([bash, "-n", str(SCRIPT)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_script_requests_a_rank_per_gpu_with_requeue_on_usr1():
    options = sbatch_options()
    assert options["ntasks-per-node"] == options["gpus-per-node"]
    assert int(options["nodes"]) >= 2
    assert options["signal"] == "USR1@120"
    assert "requeue" in options and options["open-mode"] == "append"


def test_script_launches_agentfly_fit_with_srun_and_the_slurm_world():
    text = SCRIPT.read_text()
    # The command as one logical line (backslash continuations joined).
    joined = re.sub(r"\\\n\s*", " ", text)
    fit = [line for line in joined.splitlines() if re.match(r'\s*srun\b.*"\$AGENTFLY" fit\b', line)]
    assert len(fit) == 1, "no (or more than one) `srun agentfly fit` line"
    line = fit[0]
    assert "AGENTFLY=${AGENTFLY:-agentfly}" in text
    for override in (
        'trainer.nnodes="$SLURM_NNODES"',
        'trainer.n_gpus_per_node="$SLURM_NTASKS_PER_NODE"',
        "trainer.resume_mode=auto",
        '"$@"',
    ):
        assert override in line, override
    assert re.search(r"ray_step \"\$head_node\" --head", text)
    assert "export RAY_ADDRESS=" in text


@pytest.mark.slow
def test_script_starts_ray_and_the_ranks_on_the_cluster(cluster: SlurmCluster, tmp_path: Path):
    """The script itself on one node with 2 ranks and 2 (fake) GPUs: Ray head up with the node's
    CPUs and GPUs, RAY_ADDRESS exported, `srun agentfly fit` started with the overrides on both
    ranks, and the pre-time-limit SIGUSR1 (sent here with scancel) reaching the ranks but not
    stopping Ray."""
    if not RAY.exists():
        pytest.skip("the ray command is not installed beside this python")
    fake = tmp_path / "agentfly"
    fake.write_text(
        f'#!/bin/bash\nexec {sys.executable} {Path(__file__).with_name("fake_agentfly.py")} "$@"\n'
    )
    fake.chmod(0o755)
    # Ray's socket paths must stay short; pytest's tmp_path can be long.
    ray_tmp = tempfile.mkdtemp(prefix="ray-")
    env = {
        "AGENTFLY": str(fake),
        "RAY": str(RAY),
        "PYTHON": sys.executable,
        "CONFIG": "conf/examples/gsm8k_calculator.yaml",
        "FAKE_OUT": str(tmp_path),
        "FAKE_WAIT_USR1": "1",
        "RAY_PORT": str(free_port()),
        "RAY_HEAD_IP": "127.0.0.1",
        "RAY_HEAD_ARGS": f"--temp-dir={ray_tmp} --include-dashboard=false",
        "RAY_START_ARGS": f"--ray-client-server-port={free_port()} "
        f"--dashboard-agent-listen-port={free_port()}",
        "RAY_WAIT_S": "90",
        # Ray replaces 127.0.0.1 with the machine's outward address unless told it is not a
        # multi-machine cluster; this keeps every connection on loopback.
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    }
    try:
        job_id = cluster.sbatch(
            SCRIPT,
            "--nodes=1",
            "--ntasks-per-node=2",
            "--gpus-per-node=2",
            "--cpus-per-task=1",
            # Share the node with the other tests' jobs (all root's) instead of --exclusive.
            "--exclusive=user",
            "--time=5",
            f"--output={tmp_path}/out.txt",
            f"--chdir={REPO}",
            args=["data.train_batch_size=4"],
            env=env,
        )
        out = tmp_path / "out.txt"
        deadline = time.monotonic() + 120
        while not all((tmp_path / f"ready.{rank}").exists() for rank in (0, 1)):
            info = cluster.job(job_id)
            assert time.monotonic() < deadline and info.get("JobState") in ("PENDING", "RUNNING"), (
                info,
                out.read_text() if out.exists() else "",
            )
            time.sleep(0.5)
        cluster.run(["scancel", "--signal=USR1", job_id])
        info = cluster.wait_job(job_id, timeout=90)
        log = out.read_text()
        assert info["JobState"] == "COMPLETED", (info, log)
        ranks = [json.loads((tmp_path / f"rank.{rank}.json").read_text()) for rank in (0, 1)]
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    for rank, record in enumerate(ranks):
        assert record["argv"] == [
            "fit",
            "--config",
            "conf/examples/gsm8k_calculator.yaml",
            "data.train_batch_size=4",
            "trainer.nnodes=1",
            "trainer.n_gpus_per_node=2",
            "trainer.resume_mode=auto",
        ], record
        assert record["env"]["SLURM_PROCID"] == str(rank) and record["env"]["SLURM_NTASKS"] == "2"
        assert record["env"]["RAY_ADDRESS"] == f"127.0.0.1:{env['RAY_PORT']}"
        assert record["usr1"] is True, record
    head = ranks[0]
    assert head["ray_nodes"] == 1 and head["ray_task"] == "ran", head
    assert head["ray_resources"]["GPU"] == 2 and head["ray_resources"]["CPU"] >= 2, head
    assert "Ray at 127.0.0.1" in log and "training exited with 0" in log, log
