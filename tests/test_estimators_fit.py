"""Every registered advantage estimator, and every KL kind in the reward and in the loss, trains
end to end through `agentfly fit` on the tiny model (CPU, in-process engine).

The reward is a text checksum of the final response (:mod:`tests.rewards`), so that chains of a
prompt score differently and the advantages are not all zero (a random model never answers `a+b`
right).
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from agentfly.cli import main
from agentfly.config.validate import _kl_kinds
from agentfly.estimators import ESTIMATORS
from tests.fit_runs import fit_args, rows, write_task
from tests.rewards import CHECKSUM as REWARD
from tests.rewards import checksum_reward


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    """Two prompts: every iteration rolls out both (2 prompts x 2 chains)."""
    return write_task(tmp_path_factory.mktemp("estimators"), [(1, 2), (3, 4)])


def estimator_args(root, model, run, steps, extra=()):
    return fit_args(root, model, run, steps, [
        f"agent.init_config.reward_name={REWARD}",
        "agent.run_config.max_turns=1",
        "agent.run_config.generation_config.max_tokens=8",
        # one mini-batch, one epoch: the ratio is exactly 1 at the only step, so the policy loss
        # is minus the token-mean of the advantages the estimator wrote into the batch
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.entropy_coeff=0",
        "actor_rollout_ref.actor.use_kl_loss=False",
        "trainer.save_freq=2",  # one checkpoint, at the end of a 2-iteration run
        *extra,
    ])


def iteration_rows(run):
    return [r for r in rows(run) if r.get("training/iteration")]


def jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("name", ESTIMATORS.names())
def test_every_registered_estimator_trains_two_iterations(task, tmp_path, name):
    root, model = task
    estimator = ESTIMATORS.get(name)
    run = tmp_path / "run"
    extra = [f"algorithm.adv_estimator={name}"]
    if estimator.needs_critic:
        extra.append(f"critic.model.path={model}")
    if estimator.needs_baselines:  # validate the base weights greedily: an independent baseline
        extra.append("trainer.val_before_train=True")
    assert main(estimator_args(root, model, run, 2, extra)) == 0

    metrics = iteration_rows(run)
    assert [float(r["training/iteration"]) for r in metrics] == [1.0, 2.0]
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)
    assert ckpt["agentfly_iteration"] == 2
    assert (run / "hf_actor" / "model.safetensors").exists()
    spread = 0.0
    for r in metrics:
        adv, pg = float(r["critic/advantages/mean"]), float(r["actor/pg_loss"])
        assert math.isfinite(adv) and math.isfinite(float(r["critic/returns/mean"]))
        # the update's loss is built on these advantages (a weak check where an estimator
        # centres them, mean ~0; the direction tests check the sign on hand-made batches)
        assert pg == pytest.approx(-adv, rel=1e-4, abs=1e-6)
        extremes = (float(r["critic/advantages/max"]), float(r["critic/advantages/min"]))
        spread = max(spread, *map(abs, extremes))
    assert spread > 0  # the rewards differ, so no estimator gives all-zero advantages
    if estimator.needs_critic:
        assert all(math.isfinite(float(r["critic/vf_loss"])) for r in metrics)
    if estimator.needs_baselines:
        check_greedy_baselines(root, run, metrics)


def check_greedy_baselines(root, run, metrics):
    """Iteration 1's baselines are the rewards of greedy chains under the base weights: the
    validation before training rolled out the same two prompts greedily with those weights."""
    val_file = run / "trajectories" / "val_trajectories_iter000000.jsonl"
    val = {rec["row"]["question"]: rec for rec in jsonl(val_file)}
    assert len(val) == 2
    for rec in val.values():  # the reward, applied by hand to the greedy response
        assert rec["reward"] == pytest.approx(checksum_reward(rec["final_response"]))
    questions = [row["question"] for row in json.loads((root / "train.json").read_text())]
    records = jsonl(run / "trajectories" / "rollouts_rank0.jsonl")
    assert [r["iteration"] for r in records] == [1, 2]
    first = [val[questions[i]]["reward"] for i in records[0]["rows"]]
    assert records[0]["baseline_rewards"] == pytest.approx(first)
    assert float(metrics[0]["rollout/reward_baseline/mean"]) == pytest.approx(sum(first) / 2)
    for rec, r in zip(records, metrics, strict=True):
        baselines = rec["baseline_rewards"]
        assert float(r["rollout/reward_baseline/mean"]) == pytest.approx(sum(baselines) / 2)
        # ReMax: return - advantage = the prompt's baseline on every sampled token, so their
        # token means differ by a length-weighted mean of the two baselines
        shift = float(r["critic/returns/mean"]) - float(r["critic/advantages/mean"])
        assert min(baselines) - 1e-5 <= shift <= max(baselines) + 1e-5


# One of each computation: an alias (k1, k2, k3) or another straight-through form runs the same
# code as these; tests/modules/test_reference_kl.py checks every name's value in a real step.
E2E_KINDS = ("kl", "abs", "mse", "low_var_kl", "full", "k3+")


def test_the_e2e_kinds_cover_every_kl_computation():
    covered = {k.rstrip("+") for k in E2E_KINDS} | {"k1", "k2", "k3"}
    assert covered >= {k.rstrip("+") for k in _kl_kinds()}


@pytest.mark.parametrize("kind", E2E_KINDS)
def test_every_kl_kind_trains_in_the_reward_and_in_the_loss(task, tmp_path, kind):
    root, model = task
    run = tmp_path / "run"
    extra = [
        "algorithm.adv_estimator=grpo",
        "algorithm.use_kl_in_reward=True", f"algorithm.kl_penalty={kind}",
        "algorithm.kl_ctrl.kl_coef=0.1",
        "actor_rollout_ref.actor.use_kl_loss=True", f"actor_rollout_ref.actor.kl_loss_type={kind}",
    ]
    with pytest.warns(UserWarning, match="penalized twice"):
        assert main(estimator_args(root, model, run, 1, extra)) == 0
    [r] = iteration_rows(run)
    # the actor starts at the reference: every KL kind is zero there
    assert float(r["actor/reward_kl_penalty"]) == pytest.approx(0.0, abs=1e-6)
    assert float(r["actor/reward_kl_penalty_coeff"]) == pytest.approx(0.1)
    assert float(r["actor/kl_loss"]) == pytest.approx(0.0, abs=1e-6)
