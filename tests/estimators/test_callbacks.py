"""The callbacks apply the pure functions; swapping the callback swaps the algorithm."""

from __future__ import annotations

import pytest
import torch

from agentfly.callbacks import AdvantageCallback, KLRewardCallback, RolloutBatchCallback
from agentfly.core.batch import RolloutBatch
from agentfly.core.batch_hooks import apply_rollout_callbacks, compute_advantages, shape_rewards
from agentfly.estimators import get_estimator, kl_penalty


def make_batch():
    scores = torch.zeros(4, 3)
    scores[:, -1] = torch.tensor([1.0, 0.0, 0.5, 0.5])
    ids = torch.ones(4, 1 + 3, dtype=torch.long)  # one prompt token, three response tokens
    return RolloutBatch(
        input_ids=ids,
        attention_mask=ids,
        position_ids=ids.cumsum(-1) - 1,
        response_mask=torch.tensor([[1, 0, 1], [1, 1, 1], [1, 1, 1], [0, 1, 1]], dtype=torch.float32),
        token_level_scores=scores,
        token_level_rewards=scores.clone(),
        index=torch.tensor([0, 0, 1, 1]),
        prompt_length=1,
        old_log_probs=torch.tensor([[-1.0, -2.0, -0.5]] * 4),
        ref_log_probs=torch.tensor([[-1.5, -1.0, -0.5]] * 4),
    )


def test_hooks_run_kl_shaping_before_advantages_whatever_the_list_order():
    batch = make_batch()
    kl_cb = KLRewardCallback(kl_penalty="kl", kl_ctrl_type="fixed", kl_coef=0.1)
    adv_cb = AdvantageCallback("grpo")
    metrics = apply_rollout_callbacks([adv_cb, kl_cb], None, None, batch)

    kl = kl_penalty(batch.old_log_probs, batch.ref_log_probs, "kl") * batch.response_mask
    shaped = batch.token_level_scores - 0.1 * kl
    assert torch.allclose(batch.token_level_rewards, shaped)
    expected, _ = get_estimator("grpo")(
        token_level_rewards=shaped, response_mask=batch.response_mask, index=[0, 0, 1, 1]
    )
    assert torch.allclose(batch.advantages, expected)
    # per-sequence masked KL means: row0 (0.5 + 0)/2, others (0.5 - 1 + 0)/3 and (-1 + 0)/2
    current = (0.25 + (-0.5 / 3) * 2 + (-0.5)) / 4
    assert metrics["actor/reward_kl_penalty"] == pytest.approx(current, abs=1e-6)
    assert metrics["actor/reward_kl_penalty_coeff"] == pytest.approx(0.1)


class Doubling(RolloutBatchCallback):
    """A user's hook: doubles the token rewards (stage 1) or adds one to them (stage 2)."""

    def __init__(self, stage: int, log: list[int]) -> None:
        self.stage, self.log = stage, log

    def on_rollout_batch(self, trainer, pl_module, batch):
        self.log.append(self.stage)
        r = batch.token_level_rewards
        batch.token_level_rewards = r * 2 if self.stage == 1 else r + batch.response_mask
        return {}


def test_hooks_of_one_phase_run_in_stage_order():
    """Two reward-shaping hooks given in reverse order run by stage: (s · 2) + 1 on each sampled
    token, not (s + 1) · 2; the advantages come after both."""
    batch, log = make_batch(), []
    shape_rewards([Doubling(2, log), Doubling(1, log)], None, None, batch)
    assert log == [1, 2]
    expected = batch.token_level_scores * 2 + batch.response_mask
    assert torch.equal(batch.token_level_rewards, expected)
    with pytest.raises(RuntimeError, match="AdvantageCallback"):
        compute_advantages([Doubling(1, log)], None, None, batch)  # stage 1 is not an estimator's


def test_without_kl_callback_scores_are_the_rewards():
    batch = make_batch()
    apply_rollout_callbacks([AdvantageCallback("rloo")], None, None, batch)
    expected, _ = get_estimator("rloo")(
        token_level_rewards=batch.token_level_scores, response_mask=batch.response_mask,
        index=[0, 0, 1, 1],
    )
    assert torch.allclose(batch.advantages, expected)


def test_adaptive_kl_callback_state_survives_a_checkpoint():
    a = KLRewardCallback(kl_ctrl_type="adaptive", kl_coef=0.2, target_kl=0.01, horizon=10)
    a.on_rollout_batch(None, None, make_batch())
    assert a.controller.value != 0.2
    b = KLRewardCallback(kl_ctrl_type="adaptive", kl_coef=0.2, target_kl=0.01, horizon=10)
    b.load_state_dict(a.state_dict())
    assert b.controller.value == a.controller.value


def test_full_kl_shapes_rewards_with_the_batch_full_kl():
    batch = make_batch()
    batch.full_kl = torch.tensor([[0.2, 9.0, 0.4]] * 4)  # the module's Σ_v p (log p - log q)
    KLRewardCallback("full", "fixed", 0.5).on_rollout_batch(None, None, batch)
    # row 0: mask 1,0,1 -> penalties 0.1, 0, 0.2 ; the masked position pays nothing
    assert batch.token_level_rewards[0].tolist() == pytest.approx([-0.1, 0.0, 1.0 - 0.2])
    assert batch.token_level_rewards[3].tolist() == pytest.approx([0.0, -4.5, 0.5 - 0.2])
    batch.full_kl = None
    with pytest.raises(KeyError, match="full_kl"):
        KLRewardCallback("full").on_rollout_batch(None, None, batch)


def test_an_unknown_kl_kind_fails_when_the_callback_is_built():
    with pytest.raises(ValueError, match="k4"):
        KLRewardCallback(kl_penalty="k4")


def test_advantage_callback_reports_critic_need():
    assert AdvantageCallback("gae").needs_critic
    assert not AdvantageCallback("grpo").needs_critic


def test_the_update_needs_a_callback_that_writes_the_advantages():
    batch = make_batch()
    with pytest.raises(RuntimeError, match="AdvantageCallback"):
        apply_rollout_callbacks([KLRewardCallback("kl", "fixed", 0.1)], None, None, batch)
