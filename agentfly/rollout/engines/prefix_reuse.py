"""The transformers engine's use of its prefix cache: whether it can keep prefixes, what a batch's
prompts reuse, and what a finished row leaves behind.

The store itself (blocks, LRU, budget) is :mod:`agentfly.rollout.engines.prefix_cache`. A prefix's
K/V can be kept only when every cache layer holds the K/V of every position: transformers' plain
``DynamicLayer``. A sliding window keeps the last positions only and a linear-attention layer a
running state, so for models with other layers the cache is off from the start; and a model whose
layers hold K/V of different shapes turns it off at its first finished row (the store's blocks
stack every layer). Either way the engine says so once, with the reason, and its
:meth:`~agentfly.rollout.engines.transformers_engine.TransformersEngine.stats` keep it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import agentfly.rollout.engines.kv_cache as kv_cache
from agentfly.rollout.engines.prefix_cache import PrefixCache

logger = logging.getLogger(__name__)

GIB = 2**30


class PrefixReuse:
    """One engine's prefix cache, or the reason it has none.

    Args:
        model: the served model; its cache layers decide whether prefixes can be kept.
        enabled: the engine's ``enable_prefix_caching``.
        max_gib: the most the kept K/V may take, in GiB (2**30 bytes).

    Attributes:
        store: the kept K/V; None when off.
        off: why the cache is off (None while on).
    """

    def __init__(self, model: Any, *, enabled: bool, max_gib: float) -> None:
        self.store: PrefixCache | None = None
        self.off: str | None = None
        self.max_bytes = int(max_gib * GIB)
        if not enabled:
            self.off = "enable_prefix_caching=False"
            return
        others = kv_cache.other_cache_layers(model)
        if others:
            self.turn_off(
                f"the model's cache layers are not all transformers' plain DynamicLayer (found "
                f"{', '.join(others)}): a sliding window or a recurrent state keeps no prefix's K/V"
            )
            return
        self.store = PrefixCache(self.max_bytes)

    def turn_off(self, reason: str) -> None:
        """Drop the store for good and say why (once: a store is turned off once)."""
        self.store, self.off = None, reason
        logger.warning("prefix caching is off: %s; every prompt is prefilled whole", reason)

    def free(self) -> int:
        """Drop every block; returns the bytes their K/V took."""
        if self.store is None:
            return 0
        freed = self.store.bytes
        self.store.clear()
        return freed

    def lookup(self, prompts: Sequence[Sequence[int]]) -> list[tuple[int, Any]]:
        """Per prompt, its longest cached prefix of whole blocks that leaves its last token to
        compute (whose logits give the first sample): ``(length, kv)``, kv of shape
        (layers, 2, kv_heads, length, head_dim), or ``(0, None)``."""
        store = self.store
        return [store.lookup(p, len(p) - 1) if store is not None else (0, None) for p in prompts]

    def remember(
        self, finished: list[tuple[int, list[int]]], cache: Any, attention_mask: Any
    ) -> None:
        """Store the K/V of the batch rows that finished.

        Args:
            finished: ``(row, tokens)`` pairs: a row of ``cache`` and the tokens it holds the
                K/V of (its prompt and sampled tokens but the last, never fed to the model).
            cache: the batch KV cache.
            attention_mask: the batch's mask, (rows, cache length): a row's tokens are its
                nonzero columns, in order.
        """
        if self.store is None:
            return
        if not kv_cache.uniform_layers(cache):
            self.turn_off(
                "the model's layers hold K/V of different shapes, and a block stacks them"
            )
            return
        for row, tokens in finished:
            columns = attention_mask[row].nonzero().squeeze(-1)

            def kv_of(start: int, end: int, row: int = row, columns: Any = columns) -> Any:
                return kv_cache.row_kv(cache, row, columns[start:end])  # (layers, 2, H, n, D)

            self.store.insert(tokens, kv_of)

    def stats(self) -> dict[str, Any]:
        """The store's size, budget and blocks, and why it is off (None while on)."""
        store = self.store
        return {
            "prefix_cache_bytes": store.bytes if store is not None else 0,
            "prefix_cache_blocks": len(store) if store is not None else 0,
            "prefix_cache_max_bytes": self.max_bytes,
            "prefix_cache_off": self.off,
        }
