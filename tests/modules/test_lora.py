"""LoRA in the module: only the adapter trains and has optimizer state, the base stays as its
file holds it; the reference is the base model (the adapter off, no second copy), so the
module's parameter memory is one base plus the adapter. Expected values come from the model
file, plain forward passes of the base and the model's shape, never from the module."""

from __future__ import annotations

import json
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from safetensors.torch import load_file

from agentfly.callbacks import AdvantageCallback
from agentfly.modules.lora import parameter_bytes
from agentfly.modules.rl_module import AgentRLModule
from agentfly.modules.settings import KLSettings, LoraSettings, ModelSettings, UpdateSettings
from tests.modules.one_update import (
    EQUAL_REWARDS,
    chain_logprobs,
    fit_once,
    load_actor,
    make_batch,
    response_tokens,
    sampled_mask,
)

LORA = LoraSettings(rank=4, alpha=8.0)


class PerturbAdapter(pl.Callback):
    """Moves the adapter (A and B) off its start before the update, so the adapted actor differs
    from the base; records the actor's log-probabilities there."""

    logprobs: list[torch.Tensor]

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        g = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for p in pl_module.actor.parameters():
                if p.requires_grad:
                    p.add_(0.3 * torch.randn(p.shape, generator=g))
        self.logprobs = chain_logprobs(pl_module.actor)


class Seen(pl.Callback):
    """The batch the update trained on, and the actor's parameters that had a gradient."""

    batch: Any = None
    with_grad: set[str]

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        self.with_grad = {n for n, p in pl_module.actor.named_parameters() if p.grad is not None}

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.batch = batch


def test_only_the_adapter_trains_and_has_optimizer_state(tiny_model_dir):
    seen = Seen()
    module, _ = fit_once(tiny_model_dir, make_batch(), [AdvantageCallback("grpo"), seen], lora=LORA)
    named = dict(module.actor.named_parameters())
    adapter = {n for n in named if ".lora_A." in n or ".lora_B." in n}
    assert adapter and seen.with_grad == adapter
    optimizer = module.optimizers().optimizer
    held = {id(p) for group in optimizer.param_groups for p in group["params"]}
    assert held == {id(named[n]) for n in adapter}
    assert {id(p) for p in optimizer.state} == held  # AdamW moments for the adapter alone
    # the base is as its file holds it; B, zero at the start, moved
    start = load_file(tiny_model_dir / "model.safetensors")
    base = {n.removeprefix("base_model.model.").replace(".base_layer.", "."): p for n, p in named.items() if n not in adapter}
    assert set(start) <= set(base)
    assert all(torch.equal(base[k], v) for k, v in start.items())
    assert all(named[n].abs().max() > 0 for n in adapter if ".lora_B." in n)


def test_the_reference_is_the_base_model(tiny_model_dir):
    """With the adapter moved off its start, the reference log-probabilities the KL term uses are
    the base model's (from its file), not the adapted actor's."""
    perturb, seen = PerturbAdapter(), Seen()
    fit_once(
        tiny_model_dir, make_batch(EQUAL_REWARDS), [AdvantageCallback("grpo"), perturb, seen],
        lora=LORA, kl=KLSettings(use_kl_loss=True, kl_loss_type="kl", kl_loss_coef=1.0),
    )
    base = chain_logprobs(load_actor(tiny_model_dir))
    for n, expected in enumerate(base):
        length = len(response_tokens(EQUAL_REWARDS[n])[0])
        ref = seen.batch.ref_log_probs[n, :length]
        mask = sampled_mask(n)
        assert torch.allclose(ref[mask], expected[mask], atol=1e-5)
        assert (perturb.logprobs[n][mask] - expected[mask]).abs().max() > 1e-2  # the actor is not the base


def test_gradient_checkpointing_trains_the_adapter(tiny_model_dir):
    module, _ = fit_once(
        tiny_model_dir, make_batch(), [AdvantageCallback("grpo")], lora=LORA,
        actor=UpdateSettings("actor", mini_batch_size=4, gradient_checkpointing=True),
    )
    moved = [p for n, p in module.actor.named_parameters() if ".lora_B." in n]
    assert moved and all(p.abs().max() > 0 for p in moved)


def _bytes_by_hand(model_dir, lora_rank: int | None) -> int:
    """float32 bytes of one copy of the tiny Qwen2 (tied head), its two rotary buffers, and
    with ``lora_rank`` the adapter on its 7 linear layers per block: r (in + out) each."""
    c = json.loads((model_dir / "config.json").read_text())
    h, i, v, layers, hd = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["num_hidden_layers"], c["head_dim"]
    assert c["num_attention_heads"] * hd == h and c["num_key_value_heads"] == c["num_attention_heads"]
    block = 3 * (h * h + h) + h * h + 3 * h * i + 2 * h  # q k v (with bias), o, gate up down, 2 norms
    base = v * h + layers * block + h + 2 * (hd // 2)  # embedding = head, final norm, inv_freq x2
    adapter = 0 if lora_rank is None else layers * lora_rank * (4 * (h + h) + 3 * (h + i))
    return 4 * (base + adapter)


@pytest.mark.parametrize("lora", [LoraSettings(), LORA], ids=["full", "lora"])
def test_parameter_memory_is_one_base_plus_the_adapter(tiny_model_dir, lora):
    """With a KL term: full fine-tuning holds the actor and a reference copy (two bases); LoRA
    holds one base and the adapter."""
    module = AgentRLModule(
        ModelSettings(str(tiny_model_dir), lora=lora), actor=UpdateSettings("actor", mini_batch_size=4),
        kl=KLSettings(use_kl_loss=True),
    )
    module.configure_model()
    measured = parameter_bytes(module.actor, module.reference)
    if lora.enabled:
        assert module.reference is None
        assert measured == _bytes_by_hand(tiny_model_dir, lora.rank)
    else:
        assert measured == 2 * _bytes_by_hand(tiny_model_dir, None)
