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

It also runs padding-free passes (:mod:`agentfly.modules.packing`) as per-row blocks: given
:func:`packed_rows` (each packed token's row, as a (1, 1, 1, N) long tensor, in place of a
mask) it attends within each row with a causal kernel and no mask, so the pass costs
``Σ_b len_b²`` attention and no (N, N) mask, less than the padded pass's ``B × L²``.

:data:`ATTENTION` lists what ``override_config.attn_implementation`` accepts.
"""

from __future__ import annotations

from typing import Any

NAME = "agentfly_sdpa"
#: the attention kinds a model may be loaded with (``*.model.override_config.attn_implementation``)
ATTENTION = ("eager", "sdpa", NAME, "flash_attention_2", "flash_attention_3", "flex_attention")
_registered = False


def packed_rows(rows: Any) -> Any:
    """What ``agentfly_sdpa`` takes as the mask of a packed sequence: each token's row (``rows``,
    (N,), rows in order). Shape: (1, 1, 1, N), long."""
    return rows[None, None, None, :].long()


def is_packed_rows(mask: Any) -> bool:
    """Whether ``mask`` is a :func:`packed_rows` (an integer (1, 1, 1, N) tensor, never a mask)."""
    import torch

    return (isinstance(mask, torch.Tensor) and mask.dim() == 4 and mask.shape[-2] == 1
            and not mask.is_floating_point() and mask.dtype != torch.bool)


def _per_row(query: Any, key: Any, value: Any, rows: Any, dropout: float, scaling: float | None,
             grouped: bool) -> Any:
    """Causal attention within each row of a packed (1, H, N, D) sequence. Returns (1, N, H, D)."""
    import torch

    _, counts = torch.unique_consecutive(rows.flatten(), return_counts=True)
    outs, start = [], 0
    for n in counts.tolist():
        end = start + n
        outs.append(torch.nn.functional.scaled_dot_product_attention(
            query[:, :, start:end], key[:, :, start:end], value[:, :, start:end],
            dropout_p=dropout, scale=scaling, is_causal=True, enable_gqa=grouped,
        ))
        start = end
    return torch.cat(outs, dim=2).transpose(1, 2).contiguous()


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
    """transformers' ``sdpa_attention_forward``, with K/V kept grouped on CPU under a mask, and
    a packed sequence's rows (:func:`packed_rows`) attended one by one."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if is_packed_rows(attention_mask):
        if kwargs.get("position_bias") is not None or key.shape[-1] != value.shape[-1]:
            raise ValueError("agentfly_sdpa: a packed pass needs plain attention (no position bias)")
        groups = getattr(module, "num_key_value_groups", 1)
        if groups > 1 and query.device.type != "cpu":  # the fused kernels take no enable_gqa
            key, value = (x.repeat_interleave(groups, dim=1) for x in (key, value))
            groups = 1
        return _per_row(query, key, value, attention_mask, dropout, scaling, groups > 1), None

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


def load_kwargs(attn_implementation: str | None) -> dict[str, str]:
    """``from_pretrained``'s keyword for an attention choice (``agentfly_sdpa`` loads as ``sdpa``
    and is switched by :func:`loaded_with`); {} for the model's own choice.

    Raises:
        ValueError: an attention not in :data:`ATTENTION`, named.
    """
    if attn_implementation is None:
        return {}
    if attn_implementation not in ATTENTION:
        raise ValueError(f"attn_implementation={attn_implementation!r} is not an attention agentfly "
                         f"runs; one of {', '.join(ATTENTION)}")
    return {"attn_implementation": "sdpa" if attn_implementation == NAME else attn_implementation}


def loaded_with(model: Any, attn_implementation: str | None) -> Any:
    """``model`` as loaded with :func:`load_kwargs`, switched to the attention asked for: the
    model's own choice (None) has ``sdpa`` run as ``agentfly_sdpa``; an explicit ``sdpa`` stays."""
    if attn_implementation in (None, NAME):
        return use_grouped_sdpa(model)
    return model


def use_grouped_sdpa(model: Any) -> Any:
    """Switch ``model`` from ``sdpa`` to ``agentfly_sdpa``; other choices are left alone.

    Returns the model. A model loaded with ``eager``, flash or flex attention keeps it.
    """
    config = getattr(model, "config", None)
    if getattr(config, "_attn_implementation", None) == "sdpa":
        model.set_attn_implementation(register())
    return model
