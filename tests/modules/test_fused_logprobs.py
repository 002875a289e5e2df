"""``use_fused_kernels``: the actor's log-probabilities, entropies and update gradient from the
hidden states and the LM head in chunks are those of the logits path, and both are those of a
plain forward over each unpadded chain; the settings that cannot hold are refused by name."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from agentfly.core.errors import ConfigError, InputError
from agentfly.modules.linear_logprobs import fused_head_problem
from agentfly.modules.rl_module import AgentRLModule
from agentfly.modules.settings import KLSettings, ModelSettings, PolicyLossSettings, UpdateSettings
from tests.config.plans import compose
from tests.modules.one_update import (
    CHAINS,
    GRPO_ADVANTAGES,
    NoScheduler,
    RecordingOptimizer,
    chain_logprobs,
    make_batch,
    response_tokens,
)


def _module(path: Any, fused: bool, *, temperature: float = 1.0, remove_padding: bool = False) -> AgentRLModule:
    module = AgentRLModule(
        ModelSettings(str(path), temperature=temperature, remove_padding=remove_padding, fused_logprobs=fused),
        actor=UpdateSettings("actor", mini_batch_size=4, micro_batch_size=2, grad_clip=1e9),
        policy_loss=PolicyLossSettings(entropy_coeff=0.05),  # the entropy's gradient joins the loss
        kl=KLSettings(use_kl_loss=True, kl_loss_type="low_var_kl", kl_loss_coef=0.5),
    )
    module.configure_model()
    module.manual_backward = lambda loss: loss.backward()  # type: ignore[method-assign]
    return module


def _update(module: AgentRLModule) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    """One mini-batch of two micro-batches: the actor's gradient and the update's metrics, with
    ratios and the KL away from their trivial values."""
    batch = make_batch()
    mask = batch.response_mask
    batch.advantages = torch.tensor(GRPO_ADVANTAGES)[:, None] * mask
    torch.manual_seed(3)
    with torch.no_grad():
        logp = module.log_probs(module.actor, batch)
        batch.old_log_probs = logp - 0.1 * mask
        batch.ref_log_probs = logp + 0.2 * torch.randn(logp.shape) * mask
    opt = RecordingOptimizer(module.actor)
    metrics = module._update(module.actor, module.actor_settings, module._actor_loss, batch, opt, NoScheduler())
    (grads,) = opt.grads
    return grads, metrics


@pytest.mark.parametrize("remove_padding", [False, True])
def test_log_probs_are_a_plain_forwards(tiny_model_dir, remove_padding):
    module = _module(tiny_model_dir, True, remove_padding=remove_padding)
    batch = make_batch()
    with torch.no_grad():
        logp = module.log_probs(module.actor, batch)  # (B, T)
    for row, (chain, expected) in enumerate(zip(CHAINS, chain_logprobs(module.actor), strict=True)):
        n = len(response_tokens(chain)[0])
        assert torch.allclose(logp[row, :n], expected, atol=1e-5), row


@pytest.mark.parametrize("remove_padding", [False, True])
def test_the_update_is_the_logits_paths(tiny_model_dir, remove_padding):
    """Gradient (policy loss, entropy bonus, KL loss, at temperature 0.7) and every metric."""
    grads, metrics = _update(_module(tiny_model_dir, False, temperature=0.7, remove_padding=remove_padding))
    f_grads, f_metrics = _update(_module(tiny_model_dir, True, temperature=0.7, remove_padding=remove_padding))
    assert metrics["actor/entropy"] > 0 and metrics["actor/kl_loss"] > 0
    for name, g in grads.items():
        assert g.abs().max() > 0, name
        assert (f_grads[name] - g).abs().max() <= 1e-5 * g.abs().max() + 1e-7, name
    assert set(f_metrics) == set(metrics)
    for key, value in metrics.items():
        if not key.startswith("timing/"):
            assert f_metrics[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key


def test_no_logits_tensor_of_the_vocabulary_is_kept_for_the_backward(tiny_model_dir):
    """What the graph saves for the backward pass: the logits path keeps (B, T, V) float tensors,
    the fused one nothing of the vocabulary's width beyond the head's own weight."""
    widths = {}
    for fused in (False, True):
        module = _module(tiny_model_dir, fused)
        batch = make_batch()
        vocab = module.actor.get_output_embeddings().weight.shape[0]
        saved: list[torch.Size] = []

        def pack(t: torch.Tensor, saved: list[torch.Size] = saved) -> torch.Tensor:
            saved.append(t.shape)
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            module.log_probs(module.actor, batch).sum()
        widths[fused] = [s for s in saved if len(s) >= 2 and s[-1] == vocab and s.numel() > vocab * 8]
    assert widths[False], "the logits path saved no (..., V) tensor: the probe sees nothing"
    assert widths[True] == []


class _Scaled(torch.nn.Module):
    def __init__(self, head: torch.nn.Module, **config: Any) -> None:
        super().__init__()
        self.head = head
        self.config = type("Config", (), config)()

    def get_output_embeddings(self) -> torch.nn.Module:
        return self.head


@pytest.mark.parametrize(
    ("model", "named"),
    [
        (_Scaled(torch.nn.Linear(4, 9, bias=True)), "bias"),
        (_Scaled(torch.nn.Linear(4, 9, bias=False), final_logit_softcapping=30.0), "final_logit_softcapping"),
        (_Scaled(torch.nn.Linear(4, 9, bias=False), logit_scale=0.5), "logit_scale"),
        (_Scaled(torch.nn.Sequential(torch.nn.Linear(4, 9))), "Sequential"),
    ],
)
def test_a_head_whose_logits_are_not_hw_is_named(model, named):
    assert named in fused_head_problem(model)


def test_a_plain_head_is_accepted_and_a_scaled_one_refused_at_load(tiny_model_dir, monkeypatch):
    assert fused_head_problem(_module(tiny_model_dir, True).actor) is None
    monkeypatch.setattr("agentfly.modules.linear_logprobs.fused_head_problem", lambda model: "its config scales the logits")
    with pytest.raises(InputError, match=r"use_fused_kernels=true.*scales the logits"):
        _module(tiny_model_dir, True)


@pytest.mark.parametrize(
    ("words", "named"),
    [
        (["actor_rollout_ref.actor.strategy=fsdp"], "strategy=fsdp"),
        (["actor_rollout_ref.actor.use_kl_loss=true", "actor_rollout_ref.actor.kl_loss_type=full"], "kl_loss_type=full"),
        (["algorithm.use_kl_in_reward=true", "algorithm.kl_penalty=full"], "kl_penalty=full"),
    ],
)
def test_what_the_fused_path_cannot_hold_is_refused_at_compose_time(words, named):
    args = ["actor_rollout_ref.model.path=m", "data.train_files=[d]", "algorithm.adv_estimator=grpo",
            "agent.init_config.reward_name=math_equal_reward_tool", "actor_rollout_ref.model.use_fused_kernels=true"]
    compose(args)  # alone it composes
    with pytest.raises(ConfigError, match=f"use_fused_kernels=true with .*{named}"):
        compose([*args, *words])
