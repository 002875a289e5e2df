"""A callback that breaks rank 1's validation rollouts (:mod:`tests.test_ddp`)."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl


class ValidationFailsOnRank1(pl.Callback):
    """On rank 1 every validation batch raises, as a broken engine pool would."""

    def on_validation_start(self, trainer: pl.Trainer, pl_module: Any) -> None:
        if trainer.global_rank == 1:
            def broken(rows: Any, sampled: bool) -> list[Any]:
                raise RuntimeError("the validation rollout broke on rank 1")

            trainer.datamodule.val_rollouts.run_pass = broken
