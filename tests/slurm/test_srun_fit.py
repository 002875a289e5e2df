"""`srun -n 2 agentfly fit ...` for real on the private single-host SLURM cluster: two CPU ranks
whose rank and world size come from SLURM, one iteration, both ranks' prompts rolled out."""

from __future__ import annotations

import json
import sys

import pytest
import torch

from agentfly.models.tiny import build_tiny_model
from tests.fit_runs import iterations_by_launch


@pytest.mark.slow
def test_srun_two_ranks_run_an_iteration(cluster, tmp_path):
    model = build_tiny_model(tmp_path / "model", initializer_range=0.2)
    rows = [{"question": f"What is {a}+{a}?", "answer": str(2 * a)} for a in range(1, 9)]
    (tmp_path / "train.json").write_text(json.dumps(rows))
    run = tmp_path / "run"
    args = [
        "srun", "-N1", "-n2", "--cpus-per-task=1", sys.executable, "-m", "agentfly.cli", "fit",
        f"data.train_files={tmp_path / 'train.json'}", "data.train_batch_size=4",
        f"agent.init_config.model_name_or_path={model}", "agent.init_config.template=qwen2.5",
        "agent.init_config.tools=[calculator,answer]", "agent.init_config.reward_name=math_equal_reward_tool",
        "agent.run_config.num_chains=2", "agent.run_config.max_turns=1",
        "agent.run_config.generation_config.max_tokens=8", "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8", "actor_rollout_ref.rollout.num_engines=0",
        "trainer.n_gpus_per_node=2", "trainer.total_training_steps=1", "trainer.save_freq=1",
        "trainer.logger=[csv]", "trainer.val_before_train=False", f"trainer.default_local_dir={run}",
    ]
    out = cluster.run(args, timeout=300, check=False)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    records = {}
    for rank in (0, 1):
        lines = (run / "trajectories" / f"rollouts_rank{rank}.jsonl").read_text().splitlines()
        rec = json.loads(lines[-1])
        assert rec["rank"] == rank and rec["world_size"] == 2 and rec["chains"] == 4
        records[rank] = set(rec["rows"])
    assert records[0].isdisjoint(records[1]) and len(records[0] | records[1]) == 4
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)["agentfly_iteration"] == 1


@pytest.mark.slow
def test_sigusr1_checkpoints_requeues_and_the_next_launch_resumes(cluster, tmp_path):
    """SIGUSR1 (what `#SBATCH --signal=USR1@120` sends before the time limit): Lightning saves
    hpc_ckpt_1.ckpt and requeues the job; the rerun of `agentfly fit ... resume_mode=auto` picks
    that checkpoint (newer than last.ckpt) and finishes the run."""
    import time

    from tests.slurm.cluster import free_port, write_job

    model = build_tiny_model(tmp_path / "model", initializer_range=0.2)
    rows = [{"question": f"What is {a}+{a}?", "answer": str(2 * a)} for a in range(1, 9)]
    (tmp_path / "train.json").write_text(json.dumps(rows))
    run = tmp_path / "run"
    total = 8
    fit = " ".join([
        sys.executable, "-m", "agentfly.cli", "fit",
        f"data.train_files={tmp_path / 'train.json'}", "data.train_batch_size=4",
        f"agent.init_config.model_name_or_path={model}", "agent.init_config.template=qwen2.5",
        "agent.init_config.tools=[calculator,answer]", "agent.init_config.reward_name=math_equal_reward_tool",
        "agent.run_config.num_chains=2", "agent.run_config.max_turns=1",
        "agent.run_config.generation_config.max_tokens=48", "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8", "actor_rollout_ref.rollout.num_engines=0",
        "trainer.n_gpus_per_node=2", f"trainer.total_training_steps={total}", "trainer.save_freq=1",
        "trainer.logger=[csv]", "trainer.val_before_train=False", "trainer.resume_mode=auto",
        f"trainer.default_local_dir={run}",
    ])
    job = write_job(tmp_path / "job.sh", f"export MASTER_ADDR=127.0.0.1 MASTER_PORT={free_port()}\nsrun {fit}\n")
    job_id = cluster.sbatch(job, "-N1", "--ntasks-per-node=2", "--requeue", "--open-mode=append", f"-o{tmp_path}/out.txt")
    deadline = time.monotonic() + 180
    while not (run / "checkpoints" / "iter_000001.ckpt").exists():
        info = cluster.job(job_id)
        out = (tmp_path / "out.txt").read_text() if (tmp_path / "out.txt").exists() else ""
        assert time.monotonic() < deadline and info.get("JobState") in ("PENDING", "RUNNING"), (info, out[-3000:])
        time.sleep(0.2)
    cluster.run(["scancel", "--signal=USR1", job_id])
    info = cluster.wait_job(job_id, timeout=240)
    out = (tmp_path / "out.txt").read_text()
    assert info["JobState"] == "COMPLETED" and info["Restarts"] == "1", (info, out[-3000:])
    assert list(run.glob("hpc_ckpt_*.ckpt")), out[-3000:]
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)["agentfly_iteration"] == total
    launches = iterations_by_launch(run)  # the requeued launch continues the run's metrics file
    resumed = launches["2"]
    assert resumed and resumed[0] > 1 and resumed[-1] == total  # continued, not restarted
    assert launches["1"] == list(range(1, int(resumed[0])))  # no iteration twice
