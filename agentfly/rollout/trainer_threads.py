"""The training thread's torch threads while an in-process engine generates beside it on CPU.

Off ``sync`` on a CPU machine the producer's thread generates on its share of the cores while the
training thread updates on the rest (:mod:`agentfly.rollout.producer`). Once the producer is idle
until the next hand-over (its rollouts are done and the staleness bound holds it back), its cores
would stand unused for the rest of the update; :class:`TrainerThreads` gives them to the update
then, and takes them back before the next hand-over lets a rollout start, so the two never have
more threads than cores between them.

The switch happens on the training thread (a thread's OpenMP team size is its own), at the
boundaries of the model's blocks: before each block's forward, and in the backward pass as the
gradient reaches each block's output. It matters where the update is the longer stage: the
part of it after the rollout has ended runs on every core instead of its share.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch
from torch import nn


class TrainerThreads:
    """``share`` torch threads on the training thread while a rollout may run beside it, ``idle``
    while the producer is idle.

    Args:
        share: threads while a rollout runs or may start.
        idle: threads while ``producer_idle()`` says none runs nor can start before the next
            hand-over (:meth:`before_hand_over`).
        producer_idle: whether the producer is idle (:attr:`RolloutProducer.idle`).

    Made on the training thread; the hooks do nothing on any other thread (a thread's torch
    thread count is its own).
    """

    def __init__(self, share: int, idle: int, producer_idle: Callable[[], bool]) -> None:
        if share < 1 or idle < 1:
            raise ValueError(f"thread counts must be >= 1, got share={share}, idle={idle}")
        self.share, self.idle = int(share), int(idle)
        self._producer_idle = producer_idle
        self._thread = threading.get_ident()
        self._current = torch.get_num_threads()
        self._handles: list[Any] = []

    def _set(self, n: int) -> None:
        if n != self._current:
            torch.set_num_threads(n)
            self._current = n

    def refresh(self) -> None:
        """On the training thread: ``idle`` threads if the producer is idle, else ``share``."""
        if threading.get_ident() != self._thread:
            return
        self._set(self.idle if self._producer_idle() else self.share)

    def before_hand_over(self) -> None:
        """On the training thread, before it takes a rollout (which lets the next one start)."""
        self._set(self.share)

    def attach(self, model: nn.Module) -> None:
        """Refresh at every block boundary of ``model``: the children of each ``nn.ModuleList``
        (a transformer's layers), before their forward and when the backward pass reaches their
        output."""

        def grad_hook(grad: torch.Tensor) -> None:
            self.refresh()

        def pre(module: nn.Module, args: Any) -> None:
            self.refresh()

        def post(module: nn.Module, args: Any, output: Any) -> None:
            out = output[0] if isinstance(output, (tuple, list)) and output else output
            if isinstance(out, torch.Tensor) and out.requires_grad:
                out.register_hook(grad_hook)

        for lst in (m for m in model.modules() if isinstance(m, nn.ModuleList)):
            for block in lst:
                self._handles.append(block.register_forward_pre_hook(pre))
                self._handles.append(block.register_forward_hook(post))

    def detach(self) -> None:
        """Remove the hooks and go back to ``share`` threads."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._set(self.share)
