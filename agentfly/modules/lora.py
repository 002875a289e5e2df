"""LoRA on the policy through peft (Hu et al., 2021): the adapter, the reference with it switched
off, and what the engines, the checkpoints and the export receive.

:func:`apply_lora` wraps a loaded causal LM (the actor of ``agentfly fit``; the model of
``agentfly sft``) in peft's LoRA: the base weights frozen, an adapter ``B A`` of rank r on every
target layer, B zero, so the wrapped model first computes exactly what the base did. A layer's
output is ``W x + (alpha / r) · B A x``. With a KL term the reference is the same model with the
adapter switched off (:func:`adapter_off`), not a second copy of the weights.

Checkpoints keep the adapter alone (:func:`without_base`) and get the base back when loaded
(:func:`put_base_beside_adapter`). What the engines and the Hugging Face export receive (the
adapter, or the base with the adapter merged in) is computed by :mod:`agentfly.core.weights`,
which the callbacks read.

Departure from verl: none in meaning (``lora_rank``, ``lora_alpha``, ``target_modules``;
``lora.merge`` as verl's Megatron workers read it). The adapter has no dropout, so the update's
forward passes are the engines' function of the weights.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from agentfly.core.errors import InputError
from agentfly.core.weights import is_adapted
from agentfly.modules.settings import LoraSettings


def apply_lora(model: Any, settings: LoraSettings) -> Any:
    """``model`` wrapped in peft's LoRA as ``settings`` say: only the adapter requires grad.

    Args:
        model: a loaded ``transformers`` causal LM (not yet sharded).
        settings: rank (> 0), alpha, target modules.

    Returns:
        A ``peft.PeftModel`` around ``model`` (whose weights it shares, not copies).

    Raises:
        ValueError: ``settings.rank`` is 0, or no module of ``model`` matches the targets.
    """
    from peft import LoraConfig, get_peft_model

    if not settings.enabled:
        raise ValueError("apply_lora needs a rank > 0 (lora.rank=0 trains the whole model)")
    targets = settings.target_modules
    config = LoraConfig(
        r=settings.rank,
        lora_alpha=settings.alpha,
        target_modules=targets if isinstance(targets, str) else list(targets),
        lora_dropout=0.0,
        bias="none",
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)


@contextmanager
def adapter_off(model: Any) -> Iterator[Any]:
    """Within it ``model`` computes with the base weights alone (the reference policy)."""
    with model.disable_adapter():
        yield model


@contextmanager
def reference_of(actor: Any, reference: Any) -> Iterator[Any]:
    """The reference policy: ``reference`` (a frozen copy), or when there is none and ``actor``
    has an adapter, ``actor`` with its adapter off."""
    if reference is None and is_adapted(actor):
        with adapter_off(actor) as base:
            yield base
    else:
        yield reference


def adapter_keys(model: Any, prefix: str = "") -> set[str]:
    """The state-dict keys (each with ``prefix``) of ``model``'s trainable parameters: with an
    adapter, the adapter's; the rest is the frozen base, as its path holds it."""
    return {f"{prefix}{name}" for name, p in model.named_parameters() if p.requires_grad}


def without_base(state: dict[str, Any], model: Any, prefix: str) -> dict[str, Any]:
    """A checkpoint's ``state`` less ``model``'s frozen base (its entries under ``prefix``):
    the adapter stays, and every other model's entries."""
    adapter = adapter_keys(model, prefix)
    return {k: v for k, v in state.items() if not k.startswith(prefix) or k in adapter}


def put_base_beside_adapter(state: dict[str, Any], model: Any, prefix: str) -> None:
    """Complete an adapter-only checkpoint's ``state`` (:func:`without_base`) with ``model``'s
    frozen base entries under ``prefix``, as loaded from the model's path.

    Raises:
        InputError: ``state`` lacks adapter weights ``model`` has (a checkpoint of full
            fine-tuning, or of another rank or target modules).
    """
    missing = sorted(adapter_keys(model, prefix) - set(state))
    if missing:
        raise InputError(
            f"the checkpoint has no weights for {len(missing)} of this LoRA model's adapter "
            f"parameters (e.g. {missing[0]}): it was written by a run without this adapter "
            "(full fine-tuning, another lora.rank or lora.target_modules)"
        )
    for key, value in model.state_dict(prefix=prefix).items():
        state.setdefault(key, value)


def drop_frozen_base(checkpoint: dict[str, Any], actor: Any, prefix: str = "actor.") -> None:
    """A LoRA actor's checkpoint holds its adapter, not the frozen base (the model at its path):
    ``checkpoint["state_dict"]`` less the base's entries (:func:`without_base`). Anything else:
    unchanged. Both modules' ``on_save_checkpoint``."""
    if is_adapted(actor):
        checkpoint["state_dict"] = without_base(checkpoint["state_dict"], actor, prefix)


def restore_frozen_base(checkpoint: dict[str, Any], actor: Any, prefix: str = "actor.") -> None:
    """Undo :func:`drop_frozen_base` on a loaded checkpoint: the base's entries put back beside
    the adapter (:func:`put_base_beside_adapter`). Both modules' ``on_load_checkpoint``."""
    if is_adapted(actor):
        put_base_beside_adapter(checkpoint["state_dict"], actor, prefix)


def parameter_bytes(*models: Any) -> int:
    """Bytes held by the parameters and buffers of ``models``, each storage counted once (tied
    weights, a reference that shares the actor's)."""
    seen: dict[int, int] = {}
    for model in models:
        if model is None:
            continue
        for tensor in (*model.parameters(), *model.buffers()):
            storage = tensor.untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())
