"""The policy model and its optimizer, as every training stage builds them.

``agentfly fit`` (:class:`~agentfly.modules.rl_module.AgentRLModule`: the actor and its frozen
reference) and ``agentfly sft`` (:class:`~agentfly.modules.sft_module.AgentSFTModule`) load the
policy here, so that what one stage trains the other reads the same way.
"""

from __future__ import annotations

from typing import Any

import torch

from agentfly.modules.schedule import lr_multiplier
from agentfly.modules.settings import ModelSettings, OptimizerSettings


def build_policy_model(settings: ModelSettings) -> Any:
    """The causal LM at ``settings.path``, in ``settings.dtype``, with agentfly's attention.

    Returns a ``transformers`` model in eval mode as ``from_pretrained`` leaves it; the caller
    puts it in train mode or freezes it.
    """
    from transformers import AutoModelForCausalLM

    from agentfly.models.attention import use_grouped_sdpa

    load = {"dtype": getattr(torch, settings.dtype), "trust_remote_code": settings.trust_remote_code}
    # sdpa -> agentfly_sdpa: the same attention, without copying grouped K/V on CPU
    return use_grouped_sdpa(AutoModelForCausalLM.from_pretrained(settings.path, **load))


def build_optimizer(model: Any, settings: OptimizerSettings) -> tuple[Any, Any]:
    """AdamW over ``model``'s parameters and its learning-rate schedule
    (:func:`agentfly.modules.schedule.lr_multiplier`)."""
    o = settings
    opt = torch.optim.AdamW(model.parameters(), lr=o.lr, betas=tuple(o.betas), weight_decay=o.weight_decay)
    multiplier = lr_multiplier(o.warmup_steps, o.warmup_style, o.decay_steps, o.min_lr_ratio, o.num_cycles)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, multiplier)
