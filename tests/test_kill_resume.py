"""A run killed with SIGKILL mid-iteration resumes from its last checkpoint with the same command
(`trainer.resume_mode=auto`), and a checkpoint write cut short never replaces `last.ckpt`."""

from __future__ import annotations

import csv
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from agentfly.callbacks.iterations import IterationScheduleCallback
from tests.fit_runs import fit_args, iterations_by_launch, write_task


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    return write_task(tmp_path_factory.mktemp("kill"), [(1, 2), (3, 4), (5, 6), (7, 8)], n_val=2)


#: how long a launch may take to reach its checkpoint, or to resume and finish: about 40 s with the
#: load average at 5 on two cores, three times as long at 11-16
START_S = 360


def launch(root, model, run, steps, extra=()):
    args = fit_args(
        root, model, run, steps,
        ["trainer.resume_mode=auto", "agent.run_config.generation_config.max_tokens=32", *extra],
    )
    return [sys.executable, "-m", "agentfly.cli", *args]


def kill_once_saved(cmd: list[str], checkpoint: Path, log: Path) -> None:
    """Run ``cmd`` and SIGKILL it as soon as ``checkpoint`` exists (the next iteration has
    started; nothing gets to clean up). Fails if it exits first or saves nothing within
    ``START_S``."""
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + START_S
        while not checkpoint.exists():
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, f"no checkpoint within {START_S} s"
            time.sleep(0.005)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()


def test_sigkill_mid_iteration_then_resume(task, tmp_path):
    root, model = task
    run = tmp_path / "run"
    ckpts = run / "checkpoints"
    kill_once_saved(launch(root, model, run, 1000), ckpts / "iter_000001.ckpt", tmp_path / "first.log")
    assert not (ckpts / "iter_000002.ckpt").exists(), "killed too late: iteration 2 had finished"
    assert torch.load(ckpts / "last.ckpt", weights_only=False)["agentfly_iteration"] == 1
    (ckpts / "last.ckpt.tmp").write_bytes(b"half a checkpoint")  # as if killed mid-write

    again = subprocess.run(launch(root, model, run, 2), capture_output=True, text=True, timeout=START_S)
    assert again.returncode == 0, again.stderr[-3000:]
    assert torch.load(ckpts / "last.ckpt", weights_only=False)["agentfly_iteration"] == 2
    assert (ckpts / "iter_000002.ckpt").exists() and not (ckpts / "last.ckpt.tmp").exists()
    launches = iterations_by_launch(run)  # one metrics file, the resumed launch's rows after the first's
    assert launches.pop("2") == [2.0]  # the resumed launch ran iteration 2 only...
    assert all(2.0 not in its for its in launches.values())  # ...and no row of the first's iteration 2 is left
    rollouts = [json.loads(line) for line in (run / "trajectories" / "rollouts_rank0.jsonl").read_text().splitlines()]
    assert rollouts[0]["iteration"] == 1 and rollouts[-1]["iteration"] == 2


def test_async_sigkill_then_resume_trains_on_every_prompt_exactly_once(task, tmp_path):
    """trainer.rollout_mode=async, staleness 2: when iteration 2's checkpoint lands, the rollouts
    of iterations 3 and 4 may already be buffered or in flight. SIGKILL, then the same command:
    the trained history (the last record of each iteration, as a resumed iteration is recorded
    again) covers the 4 rows once per epoch (2 iterations of 2 rows), none lost or repeated."""
    root, model = task
    run = tmp_path / "run"
    ckpts = run / "checkpoints"
    mode = ["trainer.rollout_mode=async", "trainer.max_staleness=2"]
    kill_once_saved(launch(root, model, run, 1000, mode), ckpts / "iter_000002.ckpt", tmp_path / "first.log")
    assert not (ckpts / "iter_000004.ckpt").exists(), "killed too late: the run had finished"
    again = subprocess.run(launch(root, model, run, 4, mode), capture_output=True, text=True, timeout=START_S)
    assert again.returncode == 0, again.stderr[-3000:]
    assert torch.load(ckpts / "last.ckpt", weights_only=False)["agentfly_iteration"] == 4
    records = [json.loads(line) for line in (run / "trajectories" / "rollouts_rank0.jsonl").read_text().splitlines()]
    trained = {r["iteration"]: r for r in records}  # a re-run iteration's last record counts
    assert sorted(trained) == [1, 2, 3, 4]
    for epoch in ((1, 2), (3, 4)):
        assert sorted(row for k in epoch for row in trained[k]["rows"]) == [0, 1, 2, 3], trained
    for k, r in trained.items():  # sampled at most 2 versions behind the policy trained on them
        assert r["policy_version"] == k - 1 and r["policy_version"] - r["sampled_by"][0] <= 2, r


class _Trainer:
    """Just what IterationScheduleCallback.save touches; ``fail`` cuts the checkpoint write short."""

    is_global_zero = True

    def __init__(self) -> None:
        self.strategy = SimpleNamespace(barrier=lambda name=None: None)
        self.fail = False
        self.payload = b""

    def save_checkpoint(self, path: Path) -> None:
        Path(path).write_bytes(self.payload[: len(self.payload) // 2] if self.fail else self.payload)
        if self.fail:
            raise KeyboardInterrupt  # stands in for the process dying mid-write


def test_interrupted_checkpoint_write_keeps_last_ckpt(tmp_path):
    cb = IterationScheduleCallback(total_iterations=10, checkpoint_dir=tmp_path, save_freq=1)
    trainer = _Trainer()
    trainer.payload = b"iteration 1" * 100
    cb.save(trainer, 1)
    assert (tmp_path / "last.ckpt").read_bytes() == trainer.payload
    assert (tmp_path / "iter_000001.ckpt").read_bytes() == trainer.payload
    trainer.payload, trainer.fail = b"iteration 2" * 100, True
    with pytest.raises(KeyboardInterrupt):
        cb.save(trainer, 2)
    assert (tmp_path / "last.ckpt").read_bytes() == b"iteration 1" * 100  # untouched
    assert not (tmp_path / "iter_000002.ckpt").exists()
    trainer.fail = False
    cb.save(trainer, 2)
    assert (tmp_path / "last.ckpt").read_bytes() == (tmp_path / "iter_000002.ckpt").read_bytes() == trainer.payload
    assert (tmp_path / "iter_000001.ckpt").read_bytes() == b"iteration 1" * 100  # a link, not the same file


def test_an_interrupted_hpc_checkpoint_write_leaves_no_hpc_checkpoint(tmp_path, monkeypatch):
    """SLURM's requeue checkpoint is written to a temporary name that neither Lightning's
    ``hpc_ckpt_N`` numbering nor a resume counts, and moved into place once whole."""
    from lightning.pytorch.trainer.connectors.checkpoint_connector import _CheckpointConnector

    from agentfly.callbacks.requeue import SlurmRequeue

    for key in ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID"):  # no job: nothing to requeue
        monkeypatch.delenv(key, raising=False)
    trainer = _Trainer()
    trainer.strategy.root_device = "cpu"
    trainer.world_size, trainer.default_root_dir, trainer.should_stop = 1, str(tmp_path), False
    trainer._checkpoint_connector = SimpleNamespace(hpc_save_path=_CheckpointConnector.hpc_save_path)
    trainer.payload, trainer.fail = b"hpc state" * 100, True
    cb = SlurmRequeue()
    cb.signalled = True
    with pytest.raises(KeyboardInterrupt):
        cb.on_train_batch_end(trainer, SimpleNamespace(iteration=3), None, None, 0)
    assert list(tmp_path.glob("hpc_ckpt_*")) == []
    assert _CheckpointConnector.hpc_save_path(tmp_path) == str(tmp_path / "hpc_ckpt_1.ckpt")
    trainer.fail = False
    cb.on_train_batch_end(trainer, SimpleNamespace(iteration=3), None, None, 0)
    assert (tmp_path / "hpc_ckpt_1.ckpt").read_bytes() == trainer.payload and trainer.should_stop
    assert [p.name for p in tmp_path.iterdir()] == ["hpc_ckpt_1.ckpt"]


def ctrl_c_at(iteration: int, at: str, signal_name: str = "SIGINT") -> list[str]:
    return ["--trainer.callbacks+=tests.interrupts.CtrlCAt", "--trainer.callbacks.iteration", str(iteration),
            "--trainer.callbacks.at", at, "--trainer.callbacks.signal_name", signal_name]


def test_sigterm_between_iterations_keeps_the_last_one(task, tmp_path):
    root, model = task
    run = tmp_path / "run"
    cmd = launch(root, model, run, 3, ["trainer.save_freq=-1", "trainer.test_freq=1", *ctrl_c_at(1, "validation", "SIGTERM")])
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=START_S)
    assert first.returncode != 0, first.stderr[-3000:]
    ckpts = run / "checkpoints"
    assert f"interrupted: iteration 1 is checkpointed in {ckpts / 'iter_000001.ckpt'}" in first.stderr, first.stderr[-3000:]
    assert torch.load(ckpts / "last.ckpt", weights_only=False)["agentfly_iteration"] == 1


def test_ctrl_c_between_iterations_keeps_the_last_one_and_prints_the_command_that_resumes(task, tmp_path):
    """save_freq=-1 keeps no checkpoint, but Ctrl-C after iteration 1 (in the validation before
    iteration 2's rollout) keeps it; the printed command, run as printed, trains iterations 2 and
    3 only."""
    root, model = task
    run = tmp_path / "run"
    cmd = launch(root, model, run, 3, ["trainer.save_freq=-1", "trainer.test_freq=1", *ctrl_c_at(1, "validation")])
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=START_S)
    assert first.returncode == 1, first.stderr[-3000:]
    ckpts = run / "checkpoints"
    assert f"interrupted: iteration 1 is checkpointed in {ckpts / 'iter_000001.ckpt'}" in first.stderr
    assert torch.load(ckpts / "last.ckpt", weights_only=False)["agentfly_iteration"] == 1
    assert not (ckpts / "iter_000002.ckpt").exists()
    [said] = [line for line in first.stderr.splitlines() if "To resume: " in line]
    printed = shlex.split(said.split("To resume: ", 1)[1])
    assert printed[:3] == ["python", "-m", "agentfly.cli"] and printed[3:] == cmd[3:]
    again = subprocess.run([sys.executable, *printed[1:]], capture_output=True, text=True, timeout=START_S)
    assert again.returncode == 0, again.stderr[-3000:]
    assert iterations_by_launch(run) == {"1": [1.0], "2": [2.0, 3.0]}


def test_ctrl_c_during_an_update_finishes_and_keeps_that_iteration(task, tmp_path):
    """Ctrl-C once iteration 2's rollout is in: its update is not cut in half; iteration 2 ends,
    is checkpointed and logged, and the run stops there (exit status 1)."""
    root, model = task
    run = tmp_path / "run"
    cmd = launch(root, model, run, 5, ["trainer.save_freq=-1", "trainer.test_freq=1", *ctrl_c_at(2, "start")])
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=START_S)
    assert first.returncode == 1, first.stderr[-3000:]
    assert "Ctrl-C: this iteration's update finishes and is checkpointed" in first.stderr
    ckpts = run / "checkpoints"
    assert f"interrupted: iteration 2 is checkpointed in {ckpts / 'iter_000002.ckpt'}" in first.stderr
    assert torch.load(ckpts / "last.ckpt", weights_only=False)["agentfly_iteration"] == 2
    assert not (ckpts / "iter_000001.ckpt").exists()  # save_freq=-1: only the interrupt's
    assert iterations_by_launch(run) == {"1": [1.0, 2.0]}
    # iteration 1 was validated (test_freq=1); the interrupted iteration 2 is not: the run stops
    [metrics] = (run / "metrics").glob("version_*/metrics.csv")
    rows = list(csv.DictReader(metrics.open()))
    assert any(r.get("val/val/reward") for r in rows) and rows[-1]["training/iteration"] == "2.0", rows[-1]
