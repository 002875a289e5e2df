"""Counts RL iterations: stops after ``total_iterations``, checkpoints every ``save_freq``, and
writes the actor in Hugging Face format (with its tokenizer) at the end.

Lightning's own step counter counts optimizer steps (several per iteration with PPO
mini-batches), so iterations are counted here and in the module (``pl_module.iteration``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning.pytorch.callbacks import Callback


class IterationCallback(Callback):
    def __init__(
        self,
        total_iterations: int,
        checkpoint_dir: str | Path | None = None,
        save_freq: int = -1,
        hf_dir: str | Path | None = None,
    ) -> None:
        self.total_iterations = total_iterations
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir else None
        self.save_freq = save_freq
        self.hf_dir = Path(hf_dir) if hf_dir else None

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        k = pl_module.iteration
        if self.checkpoint_dir is not None and self.save_freq > 0 and k % self.save_freq == 0:
            self.save(trainer, k)
        if k >= self.total_iterations:
            trainer.should_stop = True

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        k = pl_module.iteration
        if self.checkpoint_dir is not None and self.save_freq > 0 and k % self.save_freq:
            self.save(trainer, k)  # the end is always checkpointed
        if self.hf_dir is not None and trainer.is_global_zero:
            self.hf_dir.mkdir(parents=True, exist_ok=True)
            pl_module.actor.save_pretrained(self.hf_dir)
            tokenizer = getattr(getattr(trainer.datamodule, "session", None), "tokenizer", None)
            if tokenizer is not None:
                tokenizer.save_pretrained(self.hf_dir)

    def save(self, trainer: Any, iteration: int) -> None:
        assert self.checkpoint_dir is not None
        trainer.save_checkpoint(self.checkpoint_dir / f"iter_{iteration:06d}.ckpt")
        trainer.save_checkpoint(self.checkpoint_dir / "last.ckpt")
