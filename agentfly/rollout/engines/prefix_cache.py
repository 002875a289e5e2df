"""The transformers engine's prefix cache: the K/V of sequences it generated, kept for the next turn.

A chain's next prompt is its last prompt + the sampled tokens + an observation, so its prefill
need only compute the new suffix (vLLM's ``enable_prefix_caching``). The store is vLLM's design
at small scale: sequences are cut into blocks of ``block_size`` tokens, a block is keyed by its
parent block and its own tokens (a trie, so sequences that share a prefix, a request's ``n`` rows
or a task's chains, share its blocks), and a prompt reuses its longest run of cached full blocks.
A lookup costs a dictionary probe per block; a partial last block is recomputed, never matched.

Memory is bounded by ``max_bytes``; the least recently used blocks go first. A lookup or an
insert touches a block's ancestors after the block itself, so a parent is always more recent than
its children and the oldest block is a leaf: eviction never strands a reachable block's children.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

BlockKey = tuple[int, tuple[int, ...]]  # (parent block's id, 0 for none; the block's tokens)


@dataclass
class PrefillStats:
    """Prompt tokens over an engine's life: computed by prefills, or read from the prefix cache.

    Identical prompts of one batch count once (they are prefilled once).
    """

    prefilled_tokens: int = 0
    reused_tokens: int = 0


@dataclass
class _Block:
    id: int
    kv: Any  # (layers, 2, kv_heads, block_size, head_dim): keys [:, 0], values [:, 1]


class PrefixCache:
    """K/V blocks of token sequences, looked up by longest common prefix of full blocks.

    Args:
        max_bytes: the most the stored K/V may take; least recently used blocks are evicted.
        block_size: tokens per block (the granularity of a match).
    """

    def __init__(self, max_bytes: int, block_size: int = 16) -> None:
        if max_bytes < 0 or block_size < 1:
            raise ValueError(f"max_bytes must be >= 0 and block_size >= 1, got {max_bytes}, {block_size}")
        self.max_bytes = max_bytes
        self.block_size = block_size
        self.bytes = 0
        self._blocks: OrderedDict[BlockKey, _Block] = OrderedDict()  # oldest first
        self._ids = itertools.count(1)

    def __len__(self) -> int:
        return len(self._blocks)

    def clear(self) -> None:
        """Drop every block (the K/V were computed by weights no longer served)."""
        self._blocks.clear()
        self.bytes = 0

    def lookup(self, tokens: Sequence[int], limit: int) -> tuple[int, Any]:
        """The K/V of ``tokens``' longest cached prefix of full blocks, at most ``limit`` tokens.

        Returns:
            ``(length, kv)``: the prefix's length in tokens (a multiple of ``block_size``) and its
            K/V, shape (layers, 2, kv_heads, length, head_dim); ``(0, None)`` when nothing matches.
        """
        import torch

        path = self._walk(tokens, min(limit, len(tokens)) // self.block_size)
        if not path:
            return 0, None
        self._touch(path)
        kv = torch.cat([self._blocks[key].kv for key in path], dim=-2)
        return len(path) * self.block_size, kv

    def insert(self, tokens: Sequence[int], kv_of: Callable[[int, int], Any]) -> None:
        """Store the full blocks of ``tokens`` not stored yet.

        Args:
            tokens: a sequence whose K/V the caller holds.
            kv_of: ``kv_of(start, end)`` gives the K/V of ``tokens[start:end]``, shape
                (layers, 2, kv_heads, end - start, head_dim); called at most once, for the
                blocks missing.
        """
        size, full = self.block_size, len(tokens) // self.block_size
        path = self._walk(tokens, full)
        if len(path) < full:
            start = len(path) * size
            kv = kv_of(start, full * size)  # (layers, 2, H, full * size - start, D)
            parent = self._blocks[path[-1]].id if path else 0
            for b, offset in enumerate(range(start, full * size, size)):
                key = (parent, tuple(tokens[offset : offset + size]))
                block = _Block(next(self._ids), kv[..., b * size : (b + 1) * size, :].clone())
                self._blocks[key] = block
                self.bytes += block.kv.numel() * block.kv.element_size()
                path.append(key)
                parent = block.id
        self._touch(path)
        while self.bytes > self.max_bytes and self._blocks:
            _, evicted = self._blocks.popitem(last=False)  # a leaf: see the module docstring
            self.bytes -= evicted.kv.numel() * evicted.kv.element_size()

    def _walk(self, tokens: Sequence[int], blocks: int) -> list[BlockKey]:
        """The keys of the cached blocks that begin ``tokens``, at most ``blocks`` of them."""
        path: list[BlockKey] = []
        parent = 0
        for offset in range(0, blocks * self.block_size, self.block_size):
            key = (parent, tuple(tokens[offset : offset + self.block_size]))
            block = self._blocks.get(key)
            if block is None:
                break
            path.append(key)
            parent = block.id
        return path

    def _touch(self, path: list[BlockKey]) -> None:
        """Mark ``path``'s blocks most recently used, each block's parent after it."""
        for key in reversed(path):
            self._blocks.move_to_end(key)
