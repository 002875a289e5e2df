"""The transformers engine's KV cache: transformers' ``DynamicCache`` with layers that grow in place.

Keys and values live in buffers with room for the rest of the generation, so a decode step writes
one column instead of copying the whole cache (``DynamicLayer.update`` concatenates; the cost on
the benchmarks: bench/README.md).
"""

from __future__ import annotations

import functools
from typing import Any


def growing_cache(model: Any, reserve: int) -> Any:
    """A ``DynamicCache`` whose layers grow in place (see :func:`_growing_layer_class`).

    Models with other layer kinds (sliding windows, linear attention...) keep transformers' own
    cache.
    """
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    if plain_cache_layers(model):
        layer_class = _growing_layer_class()
        cache.layers = [layer_class(reserve) for _ in cache.layers]
    return cache


def plain_cache_layers(model: Any) -> bool:
    """Whether ``model``'s cache is transformers' plain ``DynamicLayer`` for every layer."""
    return not other_cache_layers(model)


def other_cache_layers(model: Any) -> list[str]:
    """The class names of ``model``'s cache layers that are not transformers' plain
    ``DynamicLayer`` (sliding windows, linear attention...), each once; empty when all are."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    layers = DynamicCache(config=model.config).layers
    if not layers:
        return ["none (the cache builds no layers from the model's config)"]
    return sorted({type(layer).__name__ for layer in layers if type(layer) is not DynamicLayer})


def fill_left_padded(cache: Any, parts: list[Any], width: int) -> Any:
    """Write ``parts`` into the empty ``cache``, one row each, left-padded to ``width`` positions.

    Args:
        cache: a batch KV cache with no positions yet.
        parts: per row, K/V of shape (layers, 2, kv_heads, n, head_dim) with ``n <= width``, or
            None (the row's positions are all padding); at least one is a tensor.

    Returns:
        The mask of the written positions, (rows, width): 1 on a row's last ``n``, else 0.
    """
    import torch

    kv = next(part for part in parts if part is not None)  # (layers, 2, H, n, D)
    layers, _, heads, _, dim = kv.shape
    batch_kv = kv.new_zeros((layers, 2, len(parts), heads, width, dim))
    mask = kv.new_zeros((len(parts), width), dtype=torch.long)
    for u, part in enumerate(parts):
        if part is not None:
            n = part.shape[-2]
            batch_kv[:, :, u, :, width - n :, :] = part
            mask[u, width - n :] = 1
    for layer, layer_kv in zip(cache.layers, batch_kv, strict=True):
        layer.update(layer_kv[0], layer_kv[1])  # (U, H, C, D) each
    return mask


def row_kv(cache: Any, row: int, positions: Any) -> Any:
    """Keys and values of one row of ``cache`` at ``positions`` (a 1-D index tensor), every layer
    stacked: (layers, 2, kv_heads, len(positions), head_dim)."""
    import torch

    return torch.stack(
        [
            torch.stack(
                (
                    layer.keys[row].index_select(1, positions),
                    layer.values[row].index_select(1, positions),
                )
            )
            for layer in cache.layers
        ]
    )


def uniform_layers(cache: Any) -> bool:
    """Whether every layer of ``cache`` holds keys and values of one shape (batch, length aside)."""
    shapes = {(*layer.keys.shape[1:2], *layer.keys.shape[3:]) for layer in cache.layers}
    shapes |= {(*layer.values.shape[1:2], *layer.values.shape[3:]) for layer in cache.layers}
    return len(shapes) == 1


@functools.cache
def _growing_layer_class() -> type:
    """The cache layer class, built on first use (transformers is imported lazily here)."""
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):
        """transformers' ``DynamicLayer`` with room to grow.

        ``DynamicLayer.update`` concatenates, copying the whole cache into fresh memory every
        decode step (its cost on the benchmarks: bench/README.md). Here keys and values are views into buffers with ``reserve`` spare positions, so a step
        writes its one column in place; the buffers are reallocated only when full or when
        something replaced the tensors (``crop``, ``batch_select_indices``). ``reorder_cache``
        (rows leaving the batch) selects rows of the buffers themselves.
        """

        def __init__(self, reserve: int) -> None:
            super().__init__()
            self.reserve = reserve
            self._keys: Any = None
            self._values: Any = None

        def _owns(self) -> bool:
            return (
                self._keys is not None
                and self.keys.numel() > 0
                and self.keys.data_ptr() == self._keys.data_ptr()
                and self.keys.shape[0] == self._keys.shape[0]
            )

        def update(
            self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any
        ) -> tuple[Any, Any]:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            old = self.keys.shape[-2] if self.keys.numel() else 0
            new = old + key_states.shape[-2]
            if (
                self._keys is None
                or self._keys.shape[0] != key_states.shape[0]
                or new > self._keys.shape[-2]
                or (old and not self._owns())  # the cached tensors were replaced
            ):
                batch, heads, _, dim = key_states.shape
                keys = key_states.new_empty(batch, heads, new + self.reserve, dim)
                values = value_states.new_empty(
                    batch, value_states.shape[1], new + self.reserve, value_states.shape[-1]
                )
                if old:
                    keys[..., :old, :] = self.keys
                    values[..., :old, :] = self.values
                self._keys, self._values = keys, values
            self._keys[..., old:new, :] = key_states
            self._values[..., old:new, :] = value_states
            self.keys, self.values = self._keys[..., :new, :], self._values[..., :new, :]
            return self.keys, self.values

        def reorder_cache(self, beam_idx: Any) -> None:
            if not self._owns():
                super().reorder_cache(beam_idx)
                return
            n = self.keys.shape[-2]
            self._keys = self._keys.index_select(0, beam_idx.to(self._keys.device))
            self._values = self._values.index_select(0, beam_idx.to(self._values.device))
            self.keys, self.values = self._keys[..., :n, :], self._values[..., :n, :]

    return GrowingLayer
