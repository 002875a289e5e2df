"""Grouped-query attention that stays grouped on CPU.

transformers' ``sdpa`` attention hands grouped-query K/V to ``scaled_dot_product_attention``
with ``enable_gqa=True`` only when there is no attention mask; with one (left-padded batches,
every decode step of a ragged batch, the update's padded sequences) it first copies K and V to
every query head (``repeat_kv``): on SmolLM2 (9 query heads on 3 K/V heads) that is three times
the KV cache copied per layer per decode step. On CUDA the copy buys the fused kernels (they take
a mask only without ``enable_gqa``); on CPU the kernel takes both, so the copy is pure cost
(its share of a decode step and of an update: ``bench/README.md``).

:func:`use_grouped_sdpa` switches a model that runs transformers' ``sdpa`` to ``agentfly_sdpa``:
the same function, except that on CPU a masked call keeps K/V grouped. Outputs and gradients
are those of ``sdpa`` (the kernel computes the same sums; tests compare them).
"""

from __future__ import annotations

from typing import Any

NAME = "agentfly_sdpa"
_registered = False


def grouped_sdpa_forward(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[Any, None]:
    """transformers' ``sdpa_attention_forward``, with K/V kept grouped on CPU under a mask."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    grouped = (
        query.device.type == "cpu"
        and attention_mask is not None
        and getattr(module, "num_key_value_groups", 1) > 1
        and kwargs.get("position_bias") is None
        and kwargs.get("cache") is None
        and key.shape[-1] == value.shape[-1]
    )
    if not grouped:
        return sdpa_attention_forward(
            module,
            query,
            key,
            value,
            attention_mask,
            dropout=dropout,
            scaling=scaling,
            is_causal=is_causal,
            **kwargs,
        )
    out = torch.nn.functional.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=attention_mask,
        dropout_p=dropout,
        scale=scaling,
        enable_gqa=True,
    )
    return out.transpose(1, 2).contiguous(), None


def register() -> str:
    """Register ``agentfly_sdpa`` with transformers (its masks are ``sdpa``'s); returns the name."""
    global _registered
    if not _registered:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

        AttentionInterface.register(NAME, grouped_sdpa_forward)
        AttentionMaskInterface.register(NAME, sdpa_mask)
        _registered = True
    return NAME


def use_grouped_sdpa(model: Any) -> Any:
    """Switch ``model`` from ``sdpa`` to ``agentfly_sdpa``; other choices are left alone.

    Returns the model. A model loaded with ``eager``, flash or flex attention keeps it.
    """
    config = getattr(model, "config", None)
    if getattr(config, "_attn_implementation", None) == "sdpa":
        model.set_attn_implementation(register())
    return model
