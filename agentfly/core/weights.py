"""A model's full weights, whether or not FSDP2 shards it: for the engines' weight sync, the
Hugging Face export and anything else outside the LightningModule that needs them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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
