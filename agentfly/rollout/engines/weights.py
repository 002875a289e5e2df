"""Reading weights handed to an engine: a state dict, ``(name, tensor)`` pairs, a ``.safetensors``
file or a Hugging Face checkpoint directory (all its ``*.safetensors`` shards); and splitting a
state dict into the buckets one weight update request carries
(``actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes``)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from agentfly.rollout.engines.base import Weights


def read_weights(weights: Weights) -> dict[str, torch.Tensor]:
    """Materialise ``weights`` as a name → tensor dict (tensors are not copied).

    Raises:
        FileNotFoundError: a path that is neither a ``.safetensors`` file nor a directory
            holding some.
    """
    if isinstance(weights, str | os.PathLike):
        return _read_path(Path(weights))
    if isinstance(weights, Mapping):
        return dict(weights)
    if isinstance(weights, Iterable):
        return dict(weights)
    raise TypeError(f"cannot read weights from {type(weights).__name__}")


def _read_path(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    files = sorted(path.glob("*.safetensors")) if path.is_dir() else [path]
    files = [f for f in files if f.is_file() and f.suffix == ".safetensors"]
    if not files:
        raise FileNotFoundError(f"no .safetensors weights at {path}")
    state: dict[str, torch.Tensor] = {}
    for f in files:
        state.update(load_file(f))
    return state


def weight_buckets(state: Mapping[str, torch.Tensor], max_bytes: int) -> list[dict[str, torch.Tensor]]:
    """``state`` cut, in order, into dicts of at most ``max_bytes`` of tensor data each (verl's
    checkpoint-engine buckets): a tensor that would overflow the current bucket starts the next;
    one larger than ``max_bytes`` fills a bucket alone (verl refuses it). No tensor is copied.

    Raises:
        ValueError: ``max_bytes`` is not positive.
    """
    if max_bytes <= 0:
        raise ValueError(f"a weight bucket must hold > 0 bytes, got {max_bytes}")
    buckets: list[dict[str, torch.Tensor]] = []
    size = 0
    for name, tensor in state.items():
        nbytes = tensor.numel() * tensor.element_size()
        if not buckets or size + nbytes > max_bytes:
            buckets.append({})
            size = 0
        buckets[-1][name] = tensor
        size += nbytes
    return buckets
