"""Reading weights handed to an engine: a state dict, ``(name, tensor)`` pairs, a ``.safetensors``
file or a Hugging Face checkpoint directory (all its ``*.safetensors`` shards)."""

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
