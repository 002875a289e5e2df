"""`agentfly fit` end to end on a tiny model (CPU): a few iterations, checkpoints, resume."""

from __future__ import annotations

import json
import logging
import os

import pytest
import torch
from safetensors.torch import load_file

from agentfly.cli import main
from tests.fit_runs import UNACTIONABLE, fit_args, probe_args, rows
from tests.probes import assert_updates_follow_the_advantages, read_records


def test_fit_updates_the_policy_toward_the_reward(task, tmp_path, recwarn, caplog):
    """Two iterations on a reward the random model scores unevenly (the share of even token ids):
    the reward is computed as defined, and each update moves the log-probabilities of the
    sampled tokens with their advantages (GRPO computed apart, :mod:`tests.probes`). Nothing
    said on the way is one of Lightning's or torch's notices an agentfly user cannot act on."""
    root, model = task
    run, probe = tmp_path / "run", tmp_path / "probe"
    extra = ["agent.init_config.reward_name=probe_even_token_share", *probe_args(probe)]
    caplog.set_level(logging.INFO, logger="lightning")
    assert main(fit_args(root, model, run, 2, extra)) == 0
    said = [str(w.message) for w in recwarn] + [r.getMessage() for r in caplog.records]
    assert [s for s in said if any(notice in s for notice in UNACTIONABLE)] == []
    metrics = [r for r in rows(run) if r.get("training/iteration")]
    assert [float(r["training/iteration"]) for r in metrics] == [1.0, 2.0]  # RL iterations
    assert all(float(r["rollout/chains"]) == 4 for r in metrics)
    [records] = read_records(probe)
    assert [r["iteration"] for r in records] == [1, 2]
    for rec, logged in zip(records, metrics, strict=True):
        assert rec["scores"] == pytest.approx(rec["even_share"], abs=1e-6)  # the reward, as defined
        assert float(logged["rollout/reward/mean"]) == pytest.approx(sum(rec["scores"]) / 4, abs=1e-6)
    assert_updates_follow_the_advantages(records)
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)
    assert ckpt["agentfly_iteration"] == 2
    assert (run / "checkpoints" / "iter_000001.ckpt").exists()
    exported = load_file(run / "hf_actor" / "model.safetensors")
    assert all(torch.equal(exported[k], ckpt["state_dict"][f"actor.{k}"]) for k in exported)


def test_resume_continues_like_an_uninterrupted_run(task, tmp_path):
    """2 iterations, then a resumed launch for the third, end where 3 straight iterations do:
    compared stage by stage (the weights the third iteration starts from, the rollout it trains
    on, then the weights after it), so a difference names the stage it begins in."""
    root, model = task
    straight, split = tmp_path / "straight", tmp_path / "split"
    digest = {name: tmp_path / f"{name}.jsonl" for name in ("straight", "split")}

    def seen(name: str) -> list[str]:
        return ["--trainer.callbacks+=tests.probes.BatchDigest", "--trainer.callbacks.path", str(digest[name])]

    assert main(fit_args(root, model, straight, 3, seen("straight"))) == 0
    assert main(fit_args(root, model, split, 2, seen("split"))) == 0
    assert main(fit_args(root, model, split, 3, ["trainer.resume_mode=auto", *seen("split")])) == 0
    lines = {name: [json.loads(x) for x in path.read_text().splitlines()] for name, path in digest.items()}
    assert [x["iteration"] for x in lines["split"]] == [1, 2, 3] == [x["iteration"] for x in lines["straight"]]
    logged = {name: {float(r["training/iteration"]): r for r in rows(run) if r.get("training/iteration")}
              for name, run in (("straight", straight), ("split", split))}

    def failures(i: int) -> dict[str, dict[str, str]]:  # what a rollout difference may come from
        words = ("fail", "resampl", "timeout", "error", "retr")
        return {name: {k: v for k, v in logged[name][float(i)].items() if v and any(w in k for w in words)}
                for name in logged}

    for before, after in zip(lines["straight"], lines["split"], strict=True):
        i = before["iteration"]
        assert after["weights_abs_sum"] == pytest.approx(before["weights_abs_sum"], rel=1e-9), f"weights before iteration {i}"
        for key in ("input_ids", "response_mask", "scores"):
            assert after[key] == before[key], f"the rollout of iteration {i} differs in {key}; {failures(i)}"
    a = load_file(straight / "hf_actor" / "model.safetensors")
    b = load_file(split / "hf_actor" / "model.safetensors")
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    it = [float(r["training/iteration"]) for r in rows(split) if r.get("training/iteration")]
    assert it == [1.0, 2.0, 3.0]  # the first launch's metrics are kept, the second adds one
    ra = [r["rollout/reward/mean"] for r in rows(straight) if r.get("training/iteration")]
    rb = [r["rollout/reward/mean"] for r in rows(split) if r.get("training/iteration")]
    assert ra[-1] == rb[-1]


def test_a_fit_gives_the_caller_its_thread_count_back(task, tmp_path):
    """A fit sets torch's threads (here ``trainer.num_threads=1``) for itself only: the process
    that called it has its own back after, so what runs next in it (the next test in a pytest
    worker) does not depend on which fits ran before."""
    root, model = task
    threads = torch.get_num_threads()
    torch.set_num_threads(3)  # not the machine's count, nor the run's
    try:
        assert main(fit_args(root, model, tmp_path / "run", 1, ["trainer.num_threads=1"])) == 0
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(threads)


def test_logged_losses_do_not_depend_on_the_micro_batch_size(task, tmp_path):
    """Each micro-batch holds a share of the mini-batch's loss (global normalisers): the logged
    policy and KL losses are the mini-batch's, whether it ran in one piece or in four."""
    root, model = task
    extra = ["actor_rollout_ref.actor.use_kl_loss=true", "actor_rollout_ref.actor.kl_loss_type=mse",
             "actor_rollout_ref.actor.entropy_coeff=0.05",  # moves the weights after the first step
             "actor_rollout_ref.actor.ppo_mini_batch_size=4"]  # 2 prompts x 2 chains: one mini-batch...
    logged = {}
    for micro in ("null", "1"):  # ... in one piece, or four micro-batches of one
        run = tmp_path / f"micro_{micro}"
        args = fit_args(root, model, run, 2, [*extra, f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro}"])
        assert main(args) == 0
        [*_, last] = [r for r in rows(run) if r.get("training/iteration")]
        logged[micro] = {k: float(last[k]) for k in ("actor/kl_loss", "actor/pg_loss")}
    assert logged["null"]["actor/kl_loss"] > 0  # iteration 2 starts away from the reference
    for key, value in logged["null"].items():
        assert abs(logged["1"][key] - value) <= 1e-6 + 1e-4 * abs(value), (key, logged)


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["trainer.device=cuda"], "no CUDA device is visible"),
        ([f"actor_rollout_ref.rollout.num_engines={(os.cpu_count() or 1) + 1}"], "such engine(s) fit"),
    ],
)
def test_a_request_the_machine_cannot_meet_stops_before_anything_starts(task, tmp_path, capsys, monkeypatch,
                                                                         extra, named):
    """Refused when the run is planned: before Ray, an engine or a model starts (the model path
    below does not exist, and the error is about the machine, not the model). The engines are
    checked against this machine only when no Ray is already running (a cluster is checked when
    its engines start): a Ray an earlier test left running in this test process, or a
    RAY_ADDRESS, would skip the check, so neither is there."""
    import sys

    if torch.cuda.is_available():
        pytest.skip("checks a machine without a GPU")
    if "ray" in sys.modules and sys.modules["ray"].is_initialized():
        sys.modules["ray"].shutdown()
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    root, _ = task
    args = fit_args(root, tmp_path / "no-model", tmp_path / "run", 1, extra)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert named in err, err
    assert not (tmp_path / "run").exists()  # nothing was started or written


def test_the_training_chains_text_is_kept_for_a_few_chains_per_iteration(task, tmp_path):
    """Each iteration keeps the whole text of its first training chains (4 by default, here all
    4 of the batch): the prompt exactly as the model saw it (system prompt and the tools' schemas
    included), the turns, the tool calls, the reward; the same rewards as the batch's record."""
    import json

    root, model = task
    run = tmp_path / "run"
    assert main(fit_args(root, model, run, 2)) == 0
    batches = [json.loads(x) for x in (run / "trajectories" / "rollouts_rank0.jsonl").read_text().splitlines()]
    for k in (1, 2):
        chains = [json.loads(x) for x in (run / "trajectories" / f"train_trajectories_iter{k:06d}.jsonl").read_text().splitlines()]
        assert len(chains) == 4
        assert [c["reward"] for c in chains] == batches[k - 1]["rewards"]
        for c in chains:
            assert '"name": "calculator"' in c["prompt_text"]  # the tools' schemas the template showed
            assert c["prompt_text"].rstrip().endswith("assistant")
            assert c["messages"][0]["role"] in ("system", "user") and c["response_text"]
            assert c["finish_reason"]
