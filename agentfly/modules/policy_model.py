"""The policy model and its optimizer, as every training stage builds them.

``agentfly fit`` (:class:`~agentfly.modules.rl_module.AgentRLModule`: the actor and its frozen
reference) and ``agentfly sft`` (:class:`~agentfly.modules.sft_module.AgentSFTModule`) load the
policy here, so that what one stage trains the other reads the same way.
"""

from __future__ import annotations

from typing import Any

import torch

from agentfly.modules.schedule import lr_multiplier
from agentfly.modules.settings import CriticSettings, ModelSettings, OptimizerSettings


def build_policy_model(settings: ModelSettings, dtype: str | None = None) -> Any:
    """The causal LM at ``settings.path``, in ``dtype`` (None: ``settings.dtype``, the actor's),
    with agentfly's attention.

    Returns a ``transformers`` model in eval mode as ``from_pretrained`` leaves it; the caller
    puts it in train mode or freezes it.
    """
    from agentfly.models.attention import load_kwargs, loaded_with
    from agentfly.models.loading import causal_lm_class

    torch_dtype = getattr(torch, dtype or settings.dtype)
    load = {"dtype": torch_dtype, "trust_remote_code": settings.trust_remote_code,
            **load_kwargs(settings.attn_implementation)}
    model_class = causal_lm_class(settings.path, settings.trust_remote_code)  # a VL model too
    # sdpa -> agentfly_sdpa unless sdpa was asked for: the same attention, without copying
    # grouped K/V on CPU, and packed passes row by row
    return loaded_with(model_class.from_pretrained(settings.path, **load), settings.attn_implementation)


def build_trainable_policy(settings: ModelSettings, gradient_checkpointing: bool) -> Any:
    """The policy that trains, in train mode: the whole model, or with LoRA
    (``settings.lora.enabled``) the frozen base with a trainable adapter
    (:func:`agentfly.modules.lora.apply_lora`); gradient checkpointing on when asked."""
    from agentfly.modules.lora import apply_lora

    model = build_policy_model(settings)
    if settings.lora.enabled:
        model = apply_lora(model, settings.lora)
    model.train()
    if gradient_checkpointing:
        model.gradient_checkpointing_enable()
        if settings.lora.enabled:  # checkpointed blocks need an input that requires grad
            model.enable_input_require_grads()
    return model


def build_critic_model(critic: CriticSettings, policy: ModelSettings) -> Any:
    """The critic at ``critic.path``: a token-classification head with one label (the value) on
    it, in train mode, in ``critic.dtype``, with agentfly's attention. No dropout on the value
    head (transformers defaults it to 0.1), as in verl: values at rollout time and in the update
    are the same function of the weights."""
    from transformers import AutoConfig, AutoModelForTokenClassification

    from agentfly.models.attention import load_kwargs, loaded_with

    remote = policy.trust_remote_code
    config = AutoConfig.from_pretrained(critic.path, num_labels=1, trust_remote_code=remote)
    config.classifier_dropout = 0.0
    model = AutoModelForTokenClassification.from_pretrained(
        critic.path, config=config, dtype=getattr(torch, critic.dtype), trust_remote_code=remote,
        **load_kwargs(critic.attn_implementation),
    )
    model = loaded_with(model, critic.attn_implementation).train()
    if critic.update.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    return model


def build_optimizer(model: Any, settings: OptimizerSettings) -> tuple[Any, Any]:
    """AdamW over ``model``'s trainable parameters (with LoRA, the adapter's) and its
    learning-rate schedule (:func:`agentfly.modules.schedule.lr_multiplier`)."""
    o = settings
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=o.lr, betas=tuple(o.betas), weight_decay=o.weight_decay)
    multiplier = lr_multiplier(o.warmup_steps, o.warmup_style, o.decay_steps, o.min_lr_ratio, o.num_cycles)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, multiplier)
