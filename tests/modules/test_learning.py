"""Learning goes the right way: one update of ``AgentRLModule`` on a hand-made batch, fitted by a
real Lightning ``Trainer`` with the real advantage and KL callbacks, moves the models the way the
algorithm's definition says.

The batch: two prompts, two chains each, built as ``Trajectory`` objects (two sampled turns with
an observation between them, or one turn) and collated by ``collate_trajectories``. Every expected
value is computed here with plain forward passes over each unpadded chain and the hand-known
advantages (GRPO on rewards (1, 0) and (0, 1): ±1/√2), never from the module's own outputs:

- the policy gradient: the log-probability of the sampled tokens of positive-advantage chains
  rises, of negative ones falls; the gradient the optimizer receives is the gradient of
  ``-Σ A·log p / N`` over sampled tokens only (observation tokens are not trained);
- the critic's values move toward the returns;
- the KL loss pulls the actor back to the reference, and its logged value is KL(actor ‖ ref);
  the KL penalty in the reward is KL(old ‖ ref) and shapes the rewards before the advantages;
- the PPO ratio is taken against the behaviour log-probabilities: 1 at the first step, not at
  the second.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from agentfly.callbacks import AdvantageCallback, KLRewardCallback
from agentfly.modules.losses import POLICY_LOSSES, policy_loss, register_policy_loss
from agentfly.modules.settings import (
    CriticSettings,
    KLSettings,
    OptimizerSettings,
    PolicyLossSettings,
    UpdateSettings,
)
from tests.modules.one_update import (
    CHAINS,
    EQUAL_REWARDS,
    GRPO_ADVANTAGES,
    NO_CLIP,
    GradProbe,
    Perturb,
    ValuesBefore,
    chain_log_softmax,
    chain_logprobs,
    chain_values,
    fit_once,
    load_actor,
    make_batch,
    response_tokens,
    sampled_mask,
)

# ---------------------------------------------------------------- policy gradient


def test_one_update_raises_positive_and_lowers_negative_advantage_chains(tiny_model_dir):
    before = chain_logprobs(load_actor(tiny_model_dir))
    module, metrics = fit_once(tiny_model_dir, make_batch(), [AdvantageCallback("grpo")])
    after = chain_logprobs(module.actor)
    for n, adv in enumerate(GRPO_ADVANTAGES):
        moved = (after[n] - before[n])[sampled_mask(n)]  # every sampled token of the chain
        assert bool((moved > 0).all()) if adv > 0 else bool((moved < 0).all()), (n, adv, moved)
    # the logged surrogate at ratio 1: -Σ A over sampled tokens / their count
    counts = [int(sampled_mask(n).sum()) for n in range(len(CHAINS))]
    pg = -sum(a * c for a, c in zip(GRPO_ADVANTAGES, counts, strict=True)) / sum(counts)
    assert metrics["actor/pg_loss"] == pytest.approx(pg, abs=1e-5)


@register_policy_loss("test_gradient_ascent")
def gradient_ascent(*args: Any, **kwargs: Any) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO's loss negated: a policy loss of the user's that the module must call."""
    loss, metrics = policy_loss(*args, **kwargs)
    return -loss, metrics


def test_the_module_calls_the_policy_loss_that_loss_mode_names(tiny_model_dir):
    """The registered loss named by ``loss_mode`` is the one minimised: with PPO's loss negated,
    positive-advantage chains fall and negative ones rise."""
    before = chain_logprobs(load_actor(tiny_model_dir))
    module, _ = fit_once(
        tiny_model_dir, make_batch(), [AdvantageCallback("grpo")],
        policy_loss=PolicyLossSettings(loss_mode="test_gradient_ascent", entropy_coeff=0.0),
    )
    after = chain_logprobs(module.actor)
    for n, adv in enumerate(GRPO_ADVANTAGES):
        moved = (after[n] - before[n])[sampled_mask(n)]
        assert bool((moved < 0).all()) if adv > 0 else bool((moved > 0).all()), (n, adv, moved)


def test_the_update_is_the_gradient_of_the_sampled_tokens_only(tiny_model_dir):
    """The gradient reaching the optimizer is that of ``-Σ A·log p / N`` over the sampled tokens
    (observation tokens and padding contribute nothing), computed on the unpadded chains."""
    probe = GradProbe()
    fit_once(
        tiny_model_dir, make_batch(), [AdvantageCallback("grpo"), probe],
        actor=UpdateSettings("actor", mini_batch_size=len(CHAINS), grad_clip=NO_CLIP),
    )
    assert len(probe.grads) == 1
    model = load_actor(tiny_model_dir).train()
    total = sum(int(sampled_mask(n).sum()) for n in range(len(CHAINS)))
    loss = 0.0
    for n, (_, prompt, _, _) in enumerate(CHAINS):
        ids, _ = response_tokens(CHAINS[n])
        logits = model(input_ids=torch.tensor([prompt + ids])).logits[0].float()
        logp = (
            logits[len(prompt) - 1 : -1]
            .log_softmax(-1)
            .gather(-1, torch.tensor(ids)[:, None])[:, 0]
        )
        loss = loss - GRPO_ADVANTAGES[n] * logp[sampled_mask(n)].sum() / total
    loss.backward()
    expected = {k: p.grad for k, p in model.named_parameters() if p.grad is not None}
    got = probe.grads[0]
    assert expected.keys() == got.keys()
    flat_e = torch.cat([expected[k].flatten() for k in expected])
    flat_g = torch.cat([got[k].flatten() for k in expected])
    assert flat_e.norm() > 0
    assert (flat_g - flat_e).norm() <= 1e-4 * flat_e.norm(), float(
        (flat_g - flat_e).norm() / flat_e.norm()
    )


def test_the_entropy_bonus_raises_the_entropy(tiny_model_dir):
    """No reward signal (equal rewards): the update with an entropy bonus raises the entropy of
    the actor (moved off its near-uniform start) at the sampled positions."""
    perturb = Perturb()
    module, _ = fit_once(
        tiny_model_dir,
        make_batch(EQUAL_REWARDS),
        [AdvantageCallback("grpo"), perturb],
        policy_loss=PolicyLossSettings(entropy_coeff=1.0),
    )

    def entropy(rows: list[torch.Tensor]) -> float:
        return float(
            torch.cat([-(r.exp() * r).sum(-1)[sampled_mask(n)] for n, r in enumerate(rows)]).mean()
        )

    before, after = entropy(perturb.rows), entropy(chain_log_softmax(module.actor))
    assert after > before + 1e-3, (before, after)


# ---------------------------------------------------------------- critic


def test_one_critic_update_moves_the_values_toward_the_returns(tiny_model_dir):
    """GAE with γ = λ = 1: the return of every sampled token is its chain's reward."""
    before = ValuesBefore()
    module, metrics = fit_once(
        tiny_model_dir,
        make_batch(),
        [AdvantageCallback("gae", gamma=1.0, lam=1.0), before],
        critic=CriticSettings(
            str(tiny_model_dir), UpdateSettings("critic", mini_batch_size=len(CHAINS)),
            OptimizerSettings(lr=3e-4, weight_decay=0.0),
        ),
    )
    after = chain_values(module.critic)
    returns = [torch.full_like(v, r) for v, (*_, r) in zip(after, CHAINS, strict=True)]

    def error(values: list[torch.Tensor]) -> float:  # mean squared error over sampled tokens
        sq = torch.cat(
            [
                (v - r)[sampled_mask(n)] ** 2
                for n, (v, r) in enumerate(zip(values, returns, strict=True))
            ]
        )
        return float(sq.mean())

    assert error(after) < 0.8 * error(before.values), (error(before.values), error(after))
    # the logged loss is the clipped value loss before the step: ½ · mean (V_old - R)² at V = V_old
    assert metrics["critic/vf_loss"] == pytest.approx(0.5 * error(before.values), rel=1e-4)


# ---------------------------------------------------------------- KL to the reference


def sampled_kl(kind: str, logp: list[torch.Tensor], ref: list[torch.Tensor]) -> float:
    """Token mean over the sampled tokens of the per-token estimate of KL(actor ‖ ref)."""
    per_token = []
    for n, (a, r) in enumerate(zip(logp, ref, strict=True)):
        a, r = a[sampled_mask(n)], r[sampled_mask(n)]
        per_token.append(a - r if kind == "kl" else torch.exp(r - a) - (r - a) - 1)  # k1 or k3
    return float(torch.cat(per_token).mean())


def exact_kl(rows: list[torch.Tensor], ref_rows: list[torch.Tensor]) -> float:
    """Σ_v p(v) (log p(v) - log q(v)), averaged over the sampled positions."""
    kl = [
        (a.exp() * (a - r)).sum(-1)[sampled_mask(n)]
        for n, (a, r) in enumerate(zip(rows, ref_rows, strict=True))
    ]
    return float(torch.cat(kl).mean())


@pytest.mark.parametrize("kind", ["kl", "low_var_kl"])
def test_logged_kl_loss_is_the_actor_to_reference_kl(tiny_model_dir, kind):
    """k1 and k3 are not symmetric: swapping actor and reference changes the logged value."""
    perturb = Perturb()
    _, metrics = fit_once(
        tiny_model_dir,
        make_batch(EQUAL_REWARDS),
        [AdvantageCallback("grpo"), perturb],
        kl=KLSettings(use_kl_loss=True, kl_loss_type=kind, kl_loss_coef=1.0),
    )
    ref = chain_logprobs(load_actor(tiny_model_dir))
    expected = sampled_kl(kind, perturb.logprobs, ref)
    assert abs(expected - sampled_kl(kind, ref, perturb.logprobs)) > 0.01  # the swap would show
    assert metrics["actor/kl_loss"] == pytest.approx(expected, rel=1e-4, abs=1e-6)


@pytest.mark.parametrize(("kind", "lr"), [("full", 1e-3), ("low_var_kl", 1e-4)])
def test_kl_loss_pulls_the_actor_toward_the_reference(tiny_model_dir, kind, lr):
    """No reward signal (equal rewards), an actor moved off the reference: one update with a large
    KL coefficient brings it back. Measured as what the loss minimises: the exact KL over the
    vocabulary (``full``), or k3 on the sampled tokens (the sampled kinds estimate KL from the
    sampled tokens only; the exact KL at their positions need not fall)."""
    perturb = Perturb()
    module, _ = fit_once(
        tiny_model_dir,
        make_batch(EQUAL_REWARDS),
        [AdvantageCallback("grpo"), perturb],
        kl=KLSettings(use_kl_loss=True, kl_loss_type=kind, kl_loss_coef=1.0),
        actor_optim=OptimizerSettings(lr=lr, weight_decay=0.0),
    )
    reference = load_actor(tiny_model_dir)
    if kind == "full":
        ref_rows = chain_log_softmax(reference)
        before, after = (
            exact_kl(perturb.rows, ref_rows),
            exact_kl(chain_log_softmax(module.actor), ref_rows),
        )
    else:
        ref = chain_logprobs(reference)
        before = sampled_kl(kind, perturb.logprobs, ref)
        after = sampled_kl(kind, chain_logprobs(module.actor), ref)
    assert after < 0.8 * before, (before, after)


def test_kl_in_the_reward_is_old_to_reference_and_shapes_the_returns(tiny_model_dir):
    """``use_kl_in_reward``: token rewards = score - β·k1(old, ref) on sampled tokens, before the
    advantage estimator runs (REINFORCE++ returns, γ = 1: the sum of the rewards to go)."""
    perturb, beta = Perturb(), 0.5
    _, metrics = fit_once(
        tiny_model_dir,
        make_batch(),
        [
            KLRewardCallback(kl_penalty="kl", kl_coef=beta),
            AdvantageCallback("reinforce_plus_plus"),
            perturb,
        ],
        kl=KLSettings(use_kl_loss=False, use_kl_in_reward=True),
    )
    ref = chain_logprobs(load_actor(tiny_model_dir))
    per_seq, returns = [], []
    for n, (old, r) in enumerate(zip(perturb.logprobs, ref, strict=True)):
        kl = (old - r)[sampled_mask(n)]  # k1 on the sampled tokens, in order
        per_seq.append(float(kl.mean()))
        rewards = -beta * kl
        rewards[-1] += CHAINS[n][3]  # the score sits on the last sampled token
        returns.append(rewards.flip(0).cumsum(0).flip(0))  # reward to go over sampled tokens
    assert metrics["actor/reward_kl_penalty"] == pytest.approx(
        sum(per_seq) / len(per_seq), rel=1e-4
    )
    assert metrics["critic/returns/mean"] == pytest.approx(
        float(torch.cat(returns).mean()), rel=1e-4, abs=1e-6
    )


# ---------------------------------------------------------------- PPO ratio


def test_the_ratio_is_taken_against_the_behaviour_log_probs(tiny_model_dir):
    """Two PPO epochs on one rollout: both steps compare with the log-probabilities the batch was
    sampled with (here: the actor's when the update starts, which is not the reference), so the
    first step's ratio is 1 and the second's is not."""
    calls = []

    def recording(old, logp, *args, **kwargs):
        loss, metrics = policy_loss(old, logp, *args, **kwargs)
        calls.append((old.detach().clone(), {k: float(v) for k, v in metrics.items()}))
        return loss, metrics

    name = f"test_recording_{id(calls)}"
    POLICY_LOSSES.register(name, recording)
    perturb = Perturb()
    fit_once(
        tiny_model_dir,
        make_batch(),
        [AdvantageCallback("grpo"), perturb],
        policy_loss=PolicyLossSettings(loss_mode=name, entropy_coeff=0.0),
        kl=KLSettings(use_kl_loss=True, kl_loss_coef=0.0),  # a reference, so that it could be confused
        actor=UpdateSettings("actor", mini_batch_size=len(CHAINS), epochs=2),
        actor_optim=OptimizerSettings(lr=1e-2, weight_decay=0.0),
    )
    assert len(calls) == 2
    behaviour = perturb.logprobs
    for old, _ in calls:
        for n in range(len(CHAINS)):
            got = old[n, : len(behaviour[n])][sampled_mask(n)]
            assert torch.allclose(got, behaviour[n][sampled_mask(n)], atol=1e-4), (
                n,
                got,
                behaviour[n],
            )
    (_, first), (_, second) = calls
    assert first["ppo_kl"] == pytest.approx(0.0, abs=1e-6) and first["pg_clipfrac"] == 0.0
    assert abs(second["ppo_kl"]) > 1e-3 and second["pg_clipfrac"] > 0
