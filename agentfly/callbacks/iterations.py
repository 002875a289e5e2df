"""Counts RL iterations: stops after ``total_iterations``, checkpoints every ``save_freq``, times
each iteration, and writes the actor in Hugging Face format (with its tokenizer) at the end (a
LoRA actor merged into its base, or its adapter alone).

Lightning's own step counter counts optimizer steps (several per iteration with PPO
mini-batches), so iterations are counted here and in the module (``pl_module.iteration``).

Checkpoints are written to a temporary name, flushed to disk and moved into place with
``os.replace`` (:func:`replace_durably`): a process killed mid-write (SIGKILL, a pre-empted node)
or a machine that loses power leaves the previous ``last.ckpt`` whole. ``last.ckpt`` is replaced
first and ``iter_{k}.ckpt`` linked to it after, so an existing ``iter_{k}.ckpt`` implies a
``last.ckpt`` at iteration k or later. Being a hard link, ``iter_{k}.ckpt`` shares the file of
the ``last.ckpt`` of iteration k: damaged in place, both are (a resume then falls back to
``iter_{k-1}.ckpt``, see :mod:`agentfly.run.checkpoints`).
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

from lightning.pytorch.callbacks import Callback

from agentfly.core.batch import RolloutBatch
from agentfly.core.weights import full_state, is_adapted, save_pretrained


def replace_durably(tmp: str | Path, dst: str | Path) -> None:
    """Move the complete file ``tmp`` to ``dst`` atomically, its bytes and the rename on disk."""
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, dst)
    fd = os.open(Path(dst).parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _publish(src: Path, dst: Path) -> None:
    """Make ``dst`` a complete copy of ``src`` atomically (a hard link where the filesystem allows)."""
    tmp = dst.with_name(dst.name + ".tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(src, tmp)
    except OSError:
        shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


class IterationScheduleCallback(Callback):
    """Stop, checkpoint and time by RL iteration.

    Logs ``timing/iteration_s`` (wall time from the end of the previous iteration, so rollout,
    update, weight sync and the previous checkpoint count; validation does not) and ``timing/tokens_per_s`` (the
    batch's prompt and response tokens over that time), and shows both on the progress bar.
    """

    def __init__(
        self,
        total_iterations: int,
        checkpoint_dir: str | Path | None = None,
        save_freq: int = -1,
        hf_dir: str | Path | None = None,
        hf_export: str = "merged",
    ) -> None:
        """
        Args:
            total_iterations: stop after this many RL iterations.
            checkpoint_dir: where checkpoints go (None: none are written).
            save_freq: checkpoint every this many iterations (and at the end); <= 0: never.
            hf_dir: where the actor goes at the end, in Hugging Face format (None: nowhere).
            hf_export: with a LoRA actor, ``merged`` (a plain model, the adapter merged in) or
                ``adapter`` (peft's adapter files, over the base at the model's path).
        """
        self.total_iterations = total_iterations
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir else None
        self.save_freq = save_freq
        self.hf_dir = Path(hf_dir) if hf_dir else None
        self.hf_export = hf_export
        self._last_end: float | None = None

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._last_end = time.perf_counter()

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if self._last_end is not None:
            self._last_end = time.perf_counter()  # validation time is not the next iteration's

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self._log_timing(pl_module, batch)
        k = pl_module.iteration
        if self.checkpoint_dir is not None and self.save_freq > 0 and k % self.save_freq == 0:
            self.save(trainer, k)
        if k >= self.total_iterations:
            trainer.should_stop = True
        self._last_end = time.perf_counter()

    def _log_timing(self, pl_module: Any, batch: Any) -> None:
        if self._last_end is None:
            return
        seconds = time.perf_counter() - self._last_end
        tokens = float(batch.attention_mask.sum()) if isinstance(batch, RolloutBatch) else 0.0
        metrics = {"timing/iteration_s": seconds, "timing/tokens_per_s": tokens / seconds if seconds > 0 else 0.0}
        pl_module.log_dict(metrics, on_step=True, batch_size=1)
        bar = {"s/it": seconds, "tok/s": metrics["timing/tokens_per_s"]}
        pl_module.log_dict(bar, on_step=True, prog_bar=True, logger=False, batch_size=1)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        k = pl_module.iteration
        if self.checkpoint_dir is not None and self.save_freq > 0 and k % self.save_freq:
            self.save(trainer, k)  # the end is always checkpointed
        if self.hf_dir is None:
            return
        actor = pl_module.actor
        adapted = is_adapted(actor)  # never sharded: LoRA under FSDP is refused
        state = None if adapted else full_state(actor)  # every rank: a collective under FSDP
        if trainer.is_global_zero:
            self.hf_dir.mkdir(parents=True, exist_ok=True)
            if adapted:
                save_pretrained(actor, self.hf_dir, self.hf_export)
            else:
                actor.save_pretrained(self.hf_dir, state_dict=state)
            data = trainer.datamodule  # agentfly sft's holds the tokenizer; a fit's, its rollout session
            tokenizer = getattr(data, "tokenizer", None) or getattr(getattr(data, "session", None), "tokenizer", None)
            if tokenizer is not None:
                tokenizer.save_pretrained(self.hf_dir)
            # a vision model's image processor: a later run from hf_actor processes images alike
            session = getattr(data, "session", None)
            vision = getattr(data, "vision", None) or getattr(getattr(session, "loop", None), "vision", None)
            if vision is not None:
                vision.image_processor.save_pretrained(self.hf_dir)

    def save(self, trainer: Any, iteration: int) -> None:
        """Write ``last.ckpt`` and ``iter_{iteration}.ckpt``; every rank calls it (rank 0 writes)."""
        assert self.checkpoint_dir is not None
        last = self.checkpoint_dir / "last.ckpt"
        tmp = self.checkpoint_dir / "last.ckpt.tmp"
        trainer.save_checkpoint(tmp)  # rank 0 writes; ends with a barrier
        if trainer.is_global_zero:
            replace_durably(tmp, last)
            _publish(last, self.checkpoint_dir / f"iter_{iteration:06d}.ckpt")
        trainer.strategy.barrier("agentfly_checkpoint")
