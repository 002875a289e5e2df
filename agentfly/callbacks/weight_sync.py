"""Pushes the actor's weights into every engine of the rollout pool after each update."""

from __future__ import annotations

import time
from typing import Any

from lightning.pytorch.callbacks import Callback

from agentfly.modules.fsdp import full_state


class WeightSyncCallback(Callback):
    """After each training step, rank 0 sends the actor's full state dict to the engine pool.

    Under FSDP the state dict is gathered in full first (Lightning's strategy does it); the pool
    reaches every engine with one ``update_weights`` call.
    """

    def __init__(self) -> None:
        self.last_seconds = 0.0

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        """A resumed actor differs from the checkpoint the engines loaded: sync before rollout 1."""
        if pl_module.iteration > 0:
            self.sync(trainer, pl_module)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.sync(trainer, pl_module)
        pl_module.log("timing/weight_sync_s", self.last_seconds, on_step=True, batch_size=1)

    def sync(self, trainer: Any, pl_module: Any) -> None:
        session = getattr(trainer.datamodule, "session", None)
        if session is None:
            return
        start = time.perf_counter()
        shared = bool(getattr(session, "shared", False))  # one pool for all ranks: rank 0 pushes
        state = full_state(pl_module.actor, everywhere=not shared)
        if state is not None and (trainer.global_rank == 0 or not shared):
            session.pool.update_weights(state)
        self.last_seconds = time.perf_counter() - start
