"""Keeps every engine of the rollout pool serving the actor's current weights."""

from __future__ import annotations

import time
import weakref
from typing import Any

from lightning.pytorch.callbacks import Callback

from agentfly.core.weights import adapter_payload, full_state, is_adapted, merged_state


class WeightSyncCallback(Callback):
    """Pushes the actor's weights to the engine pool whenever the engines' copy is stale.

    What is pushed: the full state dict; for an actor with a LoRA adapter, the adapter alone
    (``send_adapter``: the engines serve adapters) or the base weights with the adapter merged in
    (:mod:`agentfly.modules.lora`).

    The module's ``weights_version`` names the actor's weights: 0 is the model as loaded from its
    path, and every actor update and every checkpoint load moves it on. The callback remembers
    the version the engines hold (a new engine pool loads the model from the same path: version
    0) and syncs when the two differ, at each point a rollout may follow: the start of a fit (a
    resumed checkpoint), of a validation or a test (``agentfly validate --ckpt_path``, a
    checkpoint found by ``resume_mode``), and the end of every training batch. A validation in
    the middle of a fit, or a critic warm-up iteration, finds the engines current and pushes
    nothing.

    Every rank takes the same decision (the versions move in lockstep), so under FSDP all ranks
    join in gathering the full state (:func:`~agentfly.core.weights.full_state`). Each rank has its
    own pool and pushes to it; a session marked ``shared`` (one pool for all ranks) is pushed to by
    rank 0 alone.

    The engines' prefix caches hold K/V computed by the weights an update replaces. When an update
    starts after its own rollout (``rollout_mode=sync``) and the engine computes in the training
    process on the trainer's device, the callback frees that cache then, rather than at the push
    after the update: its memory goes to the update, and nothing is lost (the push would empty
    it). Where the rollout overlaps the update (``one_step_off``, ``async``) the cache serves it,
    and an engine in a Ray actor keeps its own; both stay within
    ``actor_rollout_ref.rollout.prefix_cache_max_gib``.
    """

    def __init__(self, send_adapter: bool = False) -> None:
        """
        Args:
            send_adapter: with a LoRA actor, push its adapter (peft's form) rather than its
                merged weights; the plan sets it when ``lora.merge`` is off and the engine
                serves adapters.
        """
        self.send_adapter = send_adapter
        self.last_seconds = 0.0  # the latest check's push, 0 when the engines were current
        self._session: Any = None  # weakref to the session whose engines hold _engine_version
        self._engine_version = 0

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self.ensure_current(trainer, pl_module)

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        self.ensure_current(trainer, pl_module)

    def on_test_start(self, trainer: Any, pl_module: Any) -> None:
        self.ensure_current(trainer, pl_module)

    def on_train_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
    ) -> None:
        self.free_prefix_cache(trainer, pl_module)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.ensure_current(trainer, pl_module)
        pl_module.log("timing/weight_sync_s", self.last_seconds, on_step=True, batch_size=1)

    def ensure_current(self, trainer: Any, pl_module: Any) -> bool:
        """Push the actor's weights if the engines hold another version; True when it pushed."""
        self.last_seconds = 0.0
        session = getattr(trainer.datamodule, "session", None)
        if session is None:
            return False
        if self._session is None or self._session() is not session:
            self._session, self._engine_version = weakref.ref(session), 0
        version = int(pl_module.weights_version)
        if version == self._engine_version:
            return False
        before_push = getattr(trainer.datamodule, "before_weight_push", None)
        if before_push is not None:
            before_push()  # one_step_off: the rollout in flight ends on the weights it began with
        self.sync(trainer, pl_module, session)
        self._engine_version = version
        return True

    def free_prefix_cache(self, trainer: Any, pl_module: Any) -> bool:
        """At an update's start, free the prefix cache of an engine on the trainer's device when
        the rollout is over (``sync``); True when it did (see the class docstring)."""
        datamodule = trainer.datamodule
        session = getattr(datamodule, "session", None)
        if session is None or getattr(datamodule, "rollout_mode", "sync") != "sync":
            return False
        if not session.pool.shares_device(pl_module.device):
            return False
        session.pool.free_prefix_cache()
        return True

    def sync(self, trainer: Any, pl_module: Any, session: Any) -> None:
        """Send the actor's weights to ``session``'s pool (every rank must call this)."""
        start = time.perf_counter()
        shared = bool(getattr(session, "shared", False))  # one pool for all ranks: rank 0 pushes
        actor = pl_module.actor
        if is_adapted(actor):  # never sharded (LoRA under FSDP is refused)
            state: Any = adapter_payload(actor) if self.send_adapter else merged_state(actor)
        else:
            state = full_state(actor, everywhere=not shared)
        if state is not None and (trainer.global_rank == 0 or not shared):
            session.pool.update_weights(state, version=int(getattr(pl_module, "policy_version", 0)))
        self.last_seconds = time.perf_counter() - start
