"""A model's weights for what lies outside the LightningModule (the engines' weight sync, the
Hugging Face export): the full state dict whether or not FSDP2 shards it; for a model with a
LoRA adapter (:func:`agentfly.modules.lora.apply_lora`), the adapter alone (:func:`adapter_payload`)
or the base with the adapter merged in (:func:`merged_state`: ``W + (alpha / r) · B A`` per
adapted layer, peft's ``get_delta_weight``, under the base model's names; no merged copy of the
model is made)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ADAPTER = "default"  # peft's name of the (only) adapter


@dataclass
class LoraAdapter:
    """A LoRA adapter on its way to the engines, in the form peft saves one: its config (what
    ``adapter_config.json`` holds) and its weights under peft's saved names
    (``base_model.model.<module>.lora_A.weight``, what ``adapter_model.safetensors`` holds).

    Attributes:
        config: peft ``LoraConfig`` fields: ``r``, ``lora_alpha``, ``target_modules`` (the
            module names it matched), ``peft_type``, ``task_type``...
        weights: the adapter's tensors (B, A per target layer).
    """

    config: dict[str, Any]
    weights: dict[str, Any]


def is_sharded(model: Any) -> bool:
    """True when ``model`` is sharded with FSDP2 (``fully_shard``)."""
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def full_state(model: Any, *, everywhere: bool = False) -> dict[str, Any] | None:
    """A model's full state dict. Under FSDP2 every rank must call it (a collective): rank 0 gets it
    on the CPU, every rank when ``everywhere`` (each rank has its own engine), the others ``None``."""
    if not is_sharded(model):
        return {k: v.detach() for k, v in model.state_dict().items()}
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=not everywhere)
    state = get_model_state_dict(model, options=options)
    return state if (everywhere or dist.get_rank() == 0) else None


def is_adapted(model: Any) -> bool:
    """True for a model :func:`apply_lora` wrapped."""
    return hasattr(model, "peft_config") and hasattr(model, "disable_adapter")


def adapter_config(model: Any) -> dict[str, Any]:
    """The adapter's peft config as ``adapter_config.json`` holds it (the target modules as the
    module names they matched, e.g. ``all-linear`` resolved)."""
    config = model.peft_config[ADAPTER]
    targets = config.target_modules
    return {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": int(config.r),
        "lora_alpha": config.lora_alpha,
        "target_modules": targets if isinstance(targets, str) else sorted(targets),
        "lora_dropout": 0.0,
        "bias": "none",
        "fan_in_fan_out": bool(config.fan_in_fan_out),
        "use_rslora": bool(config.use_rslora),
    }


def adapter_payload(model: Any) -> LoraAdapter:
    """The adapter of ``model`` for the engines: its config and weights under peft's names."""
    from peft import get_peft_model_state_dict

    weights = {k: v.detach() for k, v in get_peft_model_state_dict(model, adapter_name=ADAPTER).items()}
    return LoraAdapter(config=adapter_config(model), weights=weights)


def merged_state(model: Any) -> dict[str, Any]:
    """The base model's state dict, its own names, with the adapter merged into each target
    layer's weight: ``W + (alpha / r) · B A``. Computed per layer from the live weights (no
    tensor but the target layers' weights is copied)."""
    import torch
    from peft.tuners.lora import LoraLayer

    base = model.get_base_model()
    layers = {name: m for name, m in base.named_modules() if isinstance(m, LoraLayer)}
    adapter_parts = tuple(
        f"{name}.{part}." for name, m in layers.items() for part in m.adapter_layer_names
    )
    state = {
        key.replace(".base_layer.", "."): value.detach()
        for key, value in base.state_dict().items()
        if not key.startswith(adapter_parts)
    }
    with torch.no_grad():
        for name, layer in layers.items():
            weight = layer.get_base_layer().weight
            state[f"{name}.weight"] = weight + layer.get_delta_weight(ADAPTER).to(weight.dtype)
    return state


def save_pretrained(model: Any, directory: Any, export: str = "merged") -> None:
    """Write an adapted ``model`` in Hugging Face format: ``merged``, a plain model (the base with
    the adapter merged in, :func:`merged_state`); ``adapter``, peft's ``adapter_config.json`` and
    ``adapter_model.safetensors`` (for ``PeftModel.from_pretrained`` over the base)."""
    if export == "adapter":
        model.save_pretrained(directory)
    else:
        model.get_base_model().save_pretrained(directory, state_dict=merged_state(model))
