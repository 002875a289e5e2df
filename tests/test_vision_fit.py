"""`agentfly fit` trains the ``gui`` agent end to end on image observations (issue 39): two
iterations of the tiny Qwen2.5-VL on the synthetic GUI, on one process and on two CPU ranks, and a
resume from the first iteration's checkpoint that continues like the uninterrupted run.

A random model rarely writes a readable action, so the run's engine is ``gui_first_action``
(:mod:`tests.gui_first_action`): the transformers engine with each chain's first turn set to a
click, its log-probs the model's own. Every chain then plays ``gui_step`` and holds two images,
the row's screenshot and the one the step returned. The reward is ``probe_even_token_share``
(chains score unlike, so GRPO has advantages), and :class:`tests.probes.UpdateProbe` checks that
each update, a forward over the images, moved the actor along them.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from agentfly.cli import main
from tests.fit_runs import fit_args, rows
from tests.probes import assert_updates_follow_the_advantages, read_records

ROWS = 4


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    """(root, model): the tiny Qwen2.5-VL and ``ROWS`` train rows (2 val rows), screens beside."""
    from agentfly.envs.gui_tasks import write_gui_tasks
    from agentfly.models.tiny_vl import build_tiny_vl_model

    root = tmp_path_factory.mktemp("vision_fit")
    write_gui_tasks(root / "train.json", ROWS, split="train")
    write_gui_tasks(root / "val.json", 2, split="heldout")
    return root, build_tiny_vl_model(root / "model")


def gui_args(root, model, run, steps, probe=None, extra=()):
    probed = ["--trainer.callbacks+=tests.probes.UpdateProbe", "--trainer.callbacks.path", str(probe)] if probe else []
    return fit_args(root, model, run, steps, [
        "agent.init_config.agent_type=gui",
        "agent.init_config.template=qwen2.5-vl",
        "agent.init_config.tools=[gui_step]",
        "agent.init_config.plugins=[tests.gui_first_action]",
        "actor_rollout_ref.rollout.name=gui_first_action",
        "agent.init_config.reward_name=probe_even_token_share",
        "agent.run_config.generation_config.max_tokens=16",
        *extra,
        *probed,
    ])


def trained(run):
    return [r for r in rows(run) if r.get("training/iteration")]


def assert_trained_on_screenshots(run, probe, ranks, chains_per_rank):
    """Two iterations, every chain with its row's screenshot and a step's, finite losses, and
    updates that followed the advantages (weights moved)."""
    metrics = trained(run)
    assert [float(r["training/iteration"]) for r in metrics] == [1.0, 2.0]
    for r in metrics:
        assert float(r["rollout/tool_call_rate"]) == 1.0, r  # every first turn played gui_step
        assert float(r["rollout/failures/tool"]) == 0.0, r
        for key in ("actor/pg_loss", "actor/grad_norm", "actor/entropy"):
            assert torch.isfinite(torch.tensor(float(r[key]))), (key, r)
    for rank, records in enumerate(read_records(probe, ranks=ranks)):
        assert [rec["iteration"] for rec in records] == [1, 2], rank
        for rec in records:
            assert len(rec["images"]) == chains_per_rank and min(rec["images"]) >= 2, rec
            assert rec["scores"] == pytest.approx(rec["even_share"], abs=1e-6)  # the reward, as defined
        assert_updates_follow_the_advantages(records)
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)
    assert ckpt["agentfly_iteration"] == 2


@pytest.fixture(scope="module")
def one_process(task, tmp_path_factory):
    """The uninterrupted two-iteration run on one process: (run, probe)."""
    root, model = task
    out = tmp_path_factory.mktemp("one_process")
    run, probe = out / "run", out / "probe"
    assert main(gui_args(root, model, run, 2, probe)) == 0
    return run, probe


def test_one_process_trains_two_iterations_on_screenshots(task, one_process):
    _, model = task
    run, probe = one_process
    assert_trained_on_screenshots(run, probe, ranks=1, chains_per_rank=4)
    before = load_file(model / "model.safetensors")
    after = load_file(run / "hf_actor" / "model.safetensors")
    assert before.keys() == after.keys()
    changed = {k for k in after if not torch.equal(before[k], after[k])}
    assert {k for k in changed if k.startswith("visual.")} and {k for k in changed if k.startswith("model.layers.")}


def test_two_cpu_ranks_train_two_iterations_on_screenshots(task, tmp_path):
    """Lightning DDP over gloo: each rank rolls out its 2 rows (4 chains), the gradients of the
    image forwards are averaged."""
    root, model = task
    run, probe = tmp_path / "run", tmp_path / "probe"
    args = gui_args(root, model, run, 2, probe, [
        "trainer.device=cpu",
        "trainer.n_gpus_per_node=2",
        f"data.train_batch_size={ROWS}",  # 2 rows a rank
        f"actor_rollout_ref.actor.ppo_mini_batch_size={ROWS}",
    ])
    # the DDP launcher re-executes this command line for rank 1
    proc = subprocess.run([sys.executable, "-m", "agentfly.cli", *args], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Starting with 2 processes" in proc.stdout + proc.stderr
    assert_trained_on_screenshots(run, probe, ranks=2, chains_per_rank=4)


def test_resume_continues_like_the_uninterrupted_run(task, one_process, tmp_path):
    """One iteration, then the same command for two from its checkpoint: the second iteration's
    metrics and the final weights are the uninterrupted run's."""
    root, model = task
    straight, _ = one_process
    split = tmp_path / "split"
    assert main(gui_args(root, model, split, 1, tmp_path / "probe")) == 0
    assert main(gui_args(root, model, split, 2, tmp_path / "probe", ["trainer.resume_mode=auto"])) == 0
    assert [float(r["training/iteration"]) for r in trained(split)] == [1.0, 2.0]
    a, b = trained(straight)[-1], trained(split)[-1]
    for key in ("rollout/reward/mean", "rollout/tool_call_rate", "actor/pg_loss", "actor/grad_norm", "actor/entropy"):
        assert a[key] == b[key], (key, a[key], b[key])
    wa = load_file(straight / "hf_actor" / "model.safetensors")
    wb = load_file(split / "hf_actor" / "model.safetensors")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    [resumed] = read_records(tmp_path / "probe")
    assert [r["iteration"] for r in resumed] == [1, 2] and min(resumed[-1]["images"]) >= 2
