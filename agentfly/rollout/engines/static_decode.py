"""A static K/V cache of fixed slots, and the one-token decode step over it (on CUDA: captured
once as a CUDA graph and replayed).

The transformers engine's dynamic decode is launch-bound on a GPU: a small model spends each
token on thousands of tiny kernel launches, and the cache changes shape every step, so nothing
can be captured. Here every layer's keys and values live in buffers of shape
(slots, kv_heads, length, head_dim) allocated once per (slots, length) bucket; a slot is a batch
row, written at its own position, so the decode step has one shape whatever rows are in it. The
step (forward pass and last-position logits) is captured with ``torch.cuda.CUDAGraph``; a
replay only needs the step's input ids and positions copied into static tensors.

Departures from transformers' ``StaticCache``: its layers write one column for the whole batch
(``cumulative_length``), so rows must share a length and a finished row's slot cannot take a new
prompt; here each slot has its own position (a per-row scatter), which is what lets
:mod:`agentfly.rollout.engines.continuous_batching` refill a finished slot with a waiting row.
The attention mask is built inside the step from the positions, 4-D, which transformers passes
through untouched: none of its mask code (some of which syncs with the host) runs in the graph.
A slot holds its tokens from column 0 with no padding, so a token's column is its position.
"""

from __future__ import annotations

import functools
from typing import Any

#: attention implementations whose mask the step builds (bool for SDPA, additive for eager)
MASKED_ATTENTION = {"sdpa": False, "agentfly_sdpa": False, "eager": True}

MIN_LENGTH = 64  # the shortest length bucket: short calls share one captured graph


def unsupported(model: Any) -> str | None:
    """Why ``model`` cannot decode from static slots (None: it can)."""
    import agentfly.rollout.engines.kv_cache as kv_cache

    others = kv_cache.other_cache_layers(model)
    if others:
        return f"its cache layers are not all plain full-attention layers ({', '.join(others)})"
    attention = getattr(model.config, "_attn_implementation", None)
    if attention not in MASKED_ATTENTION:
        return f"attn_implementation={attention!r} (supported: {', '.join(MASKED_ATTENTION)})"
    return None


def row_bucket(rows: int, max_num_seqs: int) -> int:
    """Slots for a call of ``rows`` rows: the next power of two, at most ``max_num_seqs``."""
    return min(1 << max(rows - 1, 0).bit_length(), max_num_seqs)


def length_bucket(need: int, max_model_len: int) -> int:
    """Positions per slot for a call whose longest row needs ``need`` (at most
    ``max_model_len``): the next power of two, at least :data:`MIN_LENGTH`, at most
    ``max_model_len``."""
    return min(max(1 << max(need - 1, 0).bit_length(), MIN_LENGTH), max_model_len)


class StaticDecoder:
    """Static K/V slots for one model and the captured decode step over them.

    Args:
        model: the served model (its parameters are read in place by the graph: load weights
            by copying into them, and drop the decoder when the modules change).
        like: a transformers cache holding a prefill (any batch and length): each layer's K/V
            heads, head dims, dtype and device are taken from it.
        rows: slots (batch rows of the step).
        length: positions per slot.
        capture: capture the step as a CUDA graph (CUDA only); False runs it eagerly.

    Attributes:
        cache: the slots, a transformers ``Cache`` of :func:`_slot_layer_class` layers, keys and
            values (rows, kv_heads, length, head_dim) each.
    """

    def __init__(self, model: Any, like: Any, *, rows: int, length: int, capture: bool) -> None:
        import torch
        from transformers.cache_utils import Cache

        first = like.layers[0].keys
        self.model, self.rows, self.length = model, rows, length
        self.device = first.device
        self.inputs = torch.zeros((2, rows), dtype=torch.long, device=self.device)  # ids; positions
        self.columns = torch.arange(length, device=self.device)  # (L,)
        layer_class = _slot_layer_class()
        self.cache = Cache(
            layers=[
                layer_class(
                    _zeros_like_rows(layer.keys, rows, length),
                    _zeros_like_rows(layer.values, rows, length),
                    self.inputs[1],
                )
                for layer in like.layers
            ]
        )
        additive = MASKED_ATTENTION[model.config._attn_implementation]
        self.mask_dtype = first.dtype if additive else None
        self.logits: Any = None  # (rows, V) fp32: the step's output
        self.graph: Any = None
        if capture:
            self._capture()

    def nbytes(self) -> int:
        """Bytes its K/V slots hold."""
        return sum(t.numel() * t.element_size() for layer in self.cache.layers
                   for t in (layer.keys, layer.values))

    def step(self, input_ids: list[int], positions: list[int]) -> Any:
        """One decode step: feed ``input_ids[s]`` at ``positions[s]`` to every slot ``s`` (its
        K/V written at that column, attending to columns up to it).

        Returns:
            The next-token logits, (rows, V) fp32; in graph mode the graph's output buffer,
            overwritten by the next step.
        """
        import torch

        host = torch.tensor([input_ids, positions], dtype=torch.long)  # (2, rows)
        self.inputs.copy_(host, non_blocking=True)
        if self.graph is None:
            self._forward()
        else:
            self.graph.replay()
        return self.logits

    def fill(self, slots: list[int], prefill: Any, attention_mask: Any, sources: list[int]) -> None:
        """Copy prefilled rows into slots: slot ``slots[j]`` gets row ``sources[j]`` of the
        left-padded ``prefill`` cache, its real positions (``attention_mask``'s ones, in order)
        packed from column 0.

        Shapes: attention_mask (U, W) for the prefill's U rows of W positions.
        """
        import torch

        device = self.device
        source = torch.tensor(sources, device=device)  # (A,)
        target = torch.tensor(slots, device=device)  # (A,)
        real = attention_mask.index_select(0, source) != 0  # (A, W)
        width = int(real.sum(-1).max())
        if width > self.length:
            raise ValueError(f"a prompt of {width} positions does not fit slots of {self.length}")
        # each row's real columns first, in order (a stable sort of "is padding")
        columns = torch.argsort((~real).int(), dim=-1, stable=True)[:, :width]  # (A, n)
        for slot_layer, layer in zip(self.cache.layers, prefill.layers, strict=True):
            for buffer, kv in ((slot_layer.keys, layer.keys), (slot_layer.values, layer.values)):
                rows = kv.index_select(0, source)  # (A, H, W, D)
                index = columns[:, None, :, None].expand(-1, rows.shape[1], -1, rows.shape[-1])
                packed = rows.gather(2, index)  # (A, H, n, D)
                buffer[:, :, :width].index_copy_(0, target, packed)

    def mask(self, lengths: list[int]) -> Any:
        """(rows, length) mask of the columns holding K/V, for slots holding ``lengths``."""
        import torch

        filled = torch.tensor(lengths, device=self.device)  # (rows,)
        return (self.columns[None, :] < filled[:, None]).long()

    def _forward(self) -> None:
        import torch

        input_ids, positions = self.inputs[0], self.inputs[1]
        attend = self.columns[None, :] <= positions[:, None]  # (rows, L)
        mask = attend[:, None, None, :]  # (rows, 1, 1, L): one query per row
        if self.mask_dtype is not None:  # eager attention adds its mask
            blocked = torch.finfo(self.mask_dtype).min
            mask = torch.zeros(mask.shape, dtype=self.mask_dtype, device=self.device)
            mask = mask.masked_fill(~attend[:, None, None, :], blocked)
        out = self.model(
            input_ids=input_ids[:, None],
            attention_mask=mask,
            position_ids=positions[:, None],
            past_key_values=self.cache,
            use_cache=True,
        )
        self.logits = out.logits[:, -1, :].float()  # (rows, V)

    def _capture(self) -> None:
        """Warm the step up on a side stream (allocations, lazy inits), then capture it. The
        warm-up writes column 0 of every slot, before any slot is filled."""
        import torch

        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            for _ in range(2):
                self._forward()
        torch.cuda.current_stream(self.device).wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        # thread-local: a trainer's thread using the device meanwhile does not break the capture
        with torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
            self._forward()


def _zeros_like_rows(kv: Any, rows: int, length: int) -> Any:
    """A zero buffer for ``rows`` slots of ``length`` positions shaped like ``kv`` (B, H, n, D)."""
    import torch

    return torch.zeros((rows, kv.shape[1], length, kv.shape[-1]), dtype=kv.dtype, device=kv.device)


@functools.cache
def _slot_layer_class() -> type:
    """The slot cache layer class, built on first use (transformers is imported lazily here)."""
    from transformers.cache_utils import CacheLayerMixin

    class SlotLayer(CacheLayerMixin):
        """One layer's K/V slots, each slot written at its own position.

        ``update`` scatters the step's one column per slot at ``positions`` (shared with the
        decoder's static input) and returns the whole buffers: the step's mask hides the
        columns past each slot's position.
        """

        is_sliding = False

        def __init__(self, keys: Any, values: Any, positions: Any) -> None:
            super().__init__()
            self.keys, self.values = keys, values  # (R, H, L, D) each
            self.positions = positions  # (R,): the column each slot writes next
            self.is_initialized = True

        def lazy_initialization(self, key_states: Any, value_states: Any) -> None:
            """Nothing to do: the buffers exist from the start."""

        def update(
            self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any
        ) -> tuple[Any, Any]:
            for buffer, states in ((self.keys, key_states), (self.values, value_states)):
                rows, heads, _, dim = states.shape  # (R, H, 1, D)
                index = self.positions.view(rows, 1, 1, 1).expand(rows, heads, 1, dim)
                buffer.scatter_(2, index, states)
            return self.keys, self.values

        def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
            return self.keys.shape[-2], 0

        def get_seq_length(self) -> int:
            return self.keys.shape[-2]

        def get_max_length(self) -> int:
            return self.keys.shape[-2]

    return SlotLayer
