"""A real single-host SLURM cluster (tests/slurm/cluster.py): srun ranks, sbatch, SIGUSR1 delivery
and the requeue that Lightning's SLURMEnvironment performs. Skipped without slurmctld/slurmd/munge
(install them with scripts/install_system_packages.sh)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from tests.slurm.cluster import SlurmCluster, write_job

# A task that records SIGUSR1 and, when asked, requeues its job from rank 0 the way Lightning's
# SIGUSR1 handler does (`scontrol requeue $SLURM_JOB_ID`); a restarted run exits at once.
TASK = """\
import os, signal, subprocess, sys, time
log, mode = sys.argv[1], sys.argv[2]
rank, restart = os.environ["SLURM_PROCID"], os.environ.get("SLURM_RESTART_COUNT", "0")

def note(text):
    with open(log, "a") as f:
        f.write(f"{text} rank={rank} restart={restart}\\n")

def on_usr1(signum, frame):
    note("usr1")
    if mode == "requeue" and rank == "0":
        subprocess.run(["scontrol", "requeue", os.environ["SLURM_JOB_ID"]], check=True)
    sys.exit(0)

signal.signal(signal.SIGUSR1, on_usr1)
note("ready")
if restart != "0":
    sys.exit(0)
time.sleep(120)
note("timeout")
sys.exit(1)
"""


def task(tmp: Path) -> Path:
    script = tmp / "task.py"
    script.write_text(TASK)
    return script


def wait_for_lines(path: Path, needle: str, count: int, timeout: float = 30) -> list[str]:
    deadline = time.monotonic() + timeout
    lines: list[str] = []
    while time.monotonic() < deadline:
        lines = [
            line
            for line in (path.read_text().splitlines() if path.exists() else [])
            if line.startswith(needle)
        ]
        if len(lines) >= count:
            return lines
        time.sleep(0.2)
    raise AssertionError(f"{count} {needle!r} lines not in {path} after {timeout}s: {lines}")


@pytest.fixture(scope="module")
def time_limit_job(cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory):
    """Submitted first (autouse below), checked last: `--signal=USR1@N` fires on slurmctld's
    30 s time-limit check, so its wait overlaps the other tests."""
    tmp = tmp_path_factory.mktemp("timelimit")
    log = tmp / "signals.txt"
    job = write_job(
        tmp / "job.sh",
        f"""\
        srun {sys.executable} {task(tmp)} {log} plain
    """,
    )
    # Time limit 1 min, signal 60 s before it: due from the start, sent at the next check.
    job_id = cluster.sbatch(job, "-n2", "--time=1", "--signal=USR1@60", f"-o{tmp}/out.txt")
    return job_id, log, time.monotonic()


@pytest.fixture(scope="module", autouse=True)
def _submit_time_limit_job_first(time_limit_job):
    return time_limit_job


def test_srun_gives_two_ranks_and_world_size(cluster: SlurmCluster):
    out = cluster.run(
        [
            "srun",
            "-N1",
            "-n2",
            sys.executable,
            "-c",
            "import os; print(os.environ['SLURM_PROCID'], os.environ['SLURM_NTASKS'])",
        ],
        timeout=60,
    )
    assert sorted(out.stdout.split("\n")[:2]) == ["0 2", "1 2"], out.stdout + out.stderr


def test_sbatch_runs_srun_and_writes_its_output(cluster: SlurmCluster, tmp_path: Path):
    job = write_job(
        tmp_path / "job.sh",
        f"""\
        #SBATCH --nodes=1
        #SBATCH --ntasks-per-node=2
        #SBATCH --output={tmp_path}/out-%j.txt
        echo "batch nodes=$SLURM_NNODES tasks_per_node=$SLURM_NTASKS_PER_NODE"
        srun {sys.executable} -c "import os; print('rank', os.environ['SLURM_PROCID'], 'of', os.environ['SLURM_NTASKS'])"
    """,
    )
    job_id = cluster.sbatch(job)
    info = cluster.wait_job(job_id, timeout=60)
    assert info["JobState"] == "COMPLETED", info
    out = (tmp_path / f"out-{job_id}.txt").read_text()
    assert "batch nodes=1 tasks_per_node=2" in out
    assert "rank 0 of 2" in out and "rank 1 of 2" in out, out


def test_usr1_reaches_the_batch_shell_or_the_tasks(cluster: SlurmCluster, tmp_path: Path):
    """`scancel --signal=USR1 --batch` signals only the batch shell; `scancel --signal=USR1`
    only the steps' tasks, where a Python handler runs."""
    log = tmp_path / "signals.txt"
    job = write_job(
        tmp_path / "job.sh",
        f"""\
        trap 'echo "batch-usr1" >> {log}' USR1
        srun {sys.executable} {task(tmp_path)} {log} plain &
        pid=$!
        # bash runs a trap when `wait` is interrupted; wait again until srun is really done.
        while kill -0 $pid 2>/dev/null; do wait $pid; done
        wait $pid
    """,
    )
    job_id = cluster.sbatch(job, "-n2", f"-o{tmp_path}/out.txt")
    wait_for_lines(log, "ready", 2)
    cluster.run(["scancel", "--signal=USR1", "--batch", job_id])
    wait_for_lines(log, "batch-usr1", 1)
    assert not [line for line in log.read_text().splitlines() if line.startswith("usr1")]
    cluster.run(["scancel", "--signal=USR1", job_id])
    info = cluster.wait_job(job_id, timeout=30)
    assert info["JobState"] == "COMPLETED", (info, (tmp_path / "out.txt").read_text())
    lines = log.read_text().splitlines()
    assert sorted(line for line in lines if line.startswith("usr1")) == [
        "usr1 rank=0 restart=0",
        "usr1 rank=1 restart=0",
    ], lines
    assert lines.count("batch-usr1") == 1, lines


def test_usr1_handler_requeues_the_job_and_it_runs_again(cluster: SlurmCluster, tmp_path: Path):
    """Lightning's auto-requeue: rank 0's SIGUSR1 handler runs `scontrol requeue`; the job comes
    back with SLURM_RESTART_COUNT=1 (after AuthInfo cred_expire, 5 s here)."""
    log = tmp_path / "signals.txt"
    job = write_job(
        tmp_path / "job.sh",
        f"""\
        echo "batch restart=${{SLURM_RESTART_COUNT:-0}}"
        srun {sys.executable} {task(tmp_path)} {log} requeue
    """,
    )
    job_id = cluster.sbatch(job, "-n2", "--requeue", "--open-mode=append", f"-o{tmp_path}/out.txt")
    wait_for_lines(log, "ready", 2)
    cluster.run(["scancel", "--signal=USR1", job_id])
    info = cluster.wait_job(job_id, timeout=45)
    out = (tmp_path / "out.txt").read_text()
    assert info["JobState"] == "COMPLETED" and info["Restarts"] == "1", (info, out)
    assert "batch restart=0" in out and "batch restart=1" in out, out
    lines = log.read_text().splitlines()
    assert sorted(line for line in lines if line.startswith("ready")) == [
        "ready rank=0 restart=0",
        "ready rank=0 restart=1",
        "ready rank=1 restart=0",
        "ready rank=1 restart=1",
    ], lines


def test_signal_before_time_limit_reaches_the_tasks(cluster: SlurmCluster, time_limit_job):
    job_id, log, submitted = time_limit_job
    info = cluster.wait_job(job_id, timeout=max(5.0, 50 - (time.monotonic() - submitted)))
    assert info["JobState"] == "COMPLETED", info
    lines = log.read_text().splitlines()
    assert sorted(line for line in lines if line.startswith("usr1")) == [
        "usr1 rank=0 restart=0",
        "usr1 rank=1 restart=0",
    ], lines
