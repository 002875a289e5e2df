"""Two CPU ranks (Lightning DDP over gloo) run an iteration of `agentfly fit`, each rolling out its own
share of the prompts; and how `trainer.device` turns a GPU request into CPU processes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from agentfly.cli import load_config
from agentfly.run.topology import Hardware, resolve_topology
from tests.fit_runs import fit_args, probe_args, rows, write_task
from tests.probes import assert_updates_follow_the_advantages, read_records


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    return write_task(tmp_path_factory.mktemp("ddp"), [(1, 2), (3, 4), (5, 6), (7, 8)], n_val=3)  # uneven over two ranks: 1 + 2 validation rows


@pytest.mark.parametrize("estimator", ["gae"])  # a critic too, updated apart from the actor
def test_two_cpu_ranks_roll_out_different_prompts(task, tmp_path, estimator):
    root, model = task
    run, probe = tmp_path / "run", tmp_path / "probe"
    args = fit_args(root, model, run, 1, [
        "trainer.device=cpu",  # explicit: n_gpus_per_node CPU processes, DDP over gloo
        "trainer.n_gpus_per_node=2",
        "data.train_batch_size=4",  # 2 prompts per rank
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",  # 2 trajectories per rank per step
        f"algorithm.adv_estimator={estimator}",
        "trainer.val_before_train=True",
        "agent.init_config.reward_name=probe_even_token_share",  # uneven rewards: something to learn
        *([f"critic.model.path={model}", "critic.ppo_mini_batch_size=4"] if estimator == "gae" else []),
        *probe_args(probe),
    ])
    # the DDP launcher re-executes this command line for rank 1
    proc = subprocess.run([sys.executable, "-m", "agentfly.cli", *args], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Starting with 2 processes" in proc.stdout + proc.stderr
    records = {}
    for rank in (0, 1):
        lines = (run / "trajectories" / f"rollouts_rank{rank}.jsonl").read_text().splitlines()
        [rec] = [json.loads(line) for line in lines]
        assert (rec["iteration"], rec["rank"], rec["world_size"]) == (1, rank, 2)
        assert len(rec["rows"]) == 2 and rec["chains"] == 4 and all(r is not None for r in rec["rewards"])
        records[rank] = set(rec["rows"])
    assert records[0].isdisjoint(records[1])  # each rank rolled out its own prompts
    assert records[0] | records[1] == {0, 1, 2, 3}  # together: the iteration's whole batch
    [row] = [r for r in rows(run) if r.get("training/iteration")]
    assert float(row["training/iteration"]) == 1.0
    # the update (gradients averaged over the ranks) followed each rank's advantages, and the
    # critic's values moved toward each rank's returns
    for probed in read_records(probe, ranks=2):
        assert_updates_follow_the_advantages(probed)
        [rec] = probed
        assert rec["scores"] == pytest.approx(rec["even_share"], abs=1e-6)
        if estimator == "gae":
            assert rec["value_error_after"] < rec["value_error_before"], rec
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)["agentfly_iteration"] == 1
    # validation: each rank validated its own slice (rank 0 writes its 1 row of 3), and the logged
    # means count all three rows (sums and counts added over ranks): multiples of 1/3 for the
    # per-chain counts (the training reward, a share of tokens, is not a multiple of 1/3)
    val_lines = (run / "trajectories" / "val_trajectories_iter000000.jsonl").read_text().splitlines()
    assert [json.loads(line)["row"]["question"] for line in val_lines] == ["What is 1+2?"]
    [val] = [r for r in rows(run) if r.get("val/val/turns/mean")]
    for key in ("val/val/turns/mean", "val/val/tool_call_rate"):
        assert abs(float(val[key]) * 3 - round(float(val[key]) * 3)) < 1e-6, (key, val[key])


@pytest.mark.parametrize("stage", ["rollout", "validation"])
def test_a_failure_on_one_rank_stops_every_rank_naming_it(task, tmp_path, stage):
    """rollout: rank 1's reward raises on every chain, so its rollout fails (no group can be
    dropped with two ranks). validation: rank 1's validation batches raise (it holds two, rank 0
    one). Either way rank 0 stops too, naming rank 1's error, instead of waiting for a rank that
    is gone in the update's gradient all-reduce or the gather of the validation sums."""
    root, model = task
    faults = {
        "rollout": ["agent.init_config.reward_name=fails_on_rank_1", "algorithm.max_resamples=0"],
        "validation": ["trainer.val_before_train=True", "data.val_batch_size=1",
                       "--trainer.callbacks+=tests.rank_faults.ValidationFailsOnRank1"],
    }[stage]
    args = fit_args(root, model, tmp_path / "run", 1, [
        "trainer.device=cpu",
        "trainer.n_gpus_per_node=2",
        "data.train_batch_size=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "agent.init_config.plugins=[tests.rewards]",
        *faults,
    ])
    proc = subprocess.run([sys.executable, "-m", "agentfly.cli", *args], capture_output=True, text=True, timeout=240)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    what = {"rollout": "the rollout of iteration 0", "validation": "the validation at iteration 0"}[stage]
    assert f"PeerRankFailedError: {what} failed on 1 of 2 ranks" in out, out[-3000:]
    cause = {"rollout": "rank 1: FailedChainsError", "validation": "rank 1: RuntimeError: the validation rollout broke on rank 1"}[stage]
    assert cause in out, out[-3000:]
    assert not (tmp_path / "run" / "checkpoints" / "last.ckpt").exists()  # no update ran


@pytest.mark.parametrize(
    ("device", "expected", "says_no_gpu"),
    [("cpu", ("cpu", 2, 1), False), ("auto", ("cpu", 1, 1), True)],
)
def test_gpu_request_without_gpu(task, tmp_path, device, expected, says_no_gpu):
    root, model = task
    overrides = fit_args(root, model, tmp_path, 1, [f"trainer.device={device}", "trainer.n_gpus_per_node=2"])[1:]
    topology = resolve_topology(load_config(overrides), Hardware(gpus=0, cpus=2))
    assert (topology.accelerator, topology.devices, topology.nodes) == expected
    said = [n for n in topology.notes if "no GPU: running on the CPU" in n]
    assert len(said) == (1 if says_no_gpu else 0)


def test_one_gpu_asked_for_on_a_cpu_machine_is_one_cpu_process_said_by_nobody_but_lightning(task, tmp_path):
    """The CPU demo's case (n_gpus_per_node=1, device auto): nothing is reduced, so agentfly
    warns nothing (Lightning's "GPU available: False" says where it runs); still the fallback."""
    root, model = task
    overrides = fit_args(root, model, tmp_path, 1, ["trainer.n_gpus_per_node=1"])[1:]
    topology = resolve_topology(load_config(overrides), Hardware(gpus=0, cpus=2))
    assert (topology.accelerator, topology.devices) == ("cpu", 1)
    assert topology.notes == () and topology.cpu_fallback
