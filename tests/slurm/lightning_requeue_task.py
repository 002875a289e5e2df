"""One Lightning rank under `srun` (tests/slurm/test_cluster.py): CPU DDP over SLURMEnvironment.

First run: trains to step 3, writes ``ready.<rank>`` and waits there for SIGUSR1, on which
Lightning's SLURM signal handler saves ``hpc_ckpt_1.ckpt`` and rank 0 runs ``scontrol requeue``.
Requeued run (SLURM_RESTART_COUNT=1): Lightning finds that checkpoint by itself (fit's
``ckpt_path`` left None), and each rank writes ``result.<rank>`` with the step it resumed at and
the cluster environment it saw.

Usage: python lightning_requeue_task.py ROOT_DIR
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import lightning.pytorch as pl
from lightning.pytorch.demos.boring_classes import BoringModel

ROOT = Path(sys.argv[1])
RESTART = int(os.environ.get("SLURM_RESTART_COUNT", "0"))


class Model(BoringModel):
    def on_train_start(self) -> None:
        self.resumed_at = self.trainer.global_step

    def training_step(self, batch, batch_idx):
        if RESTART == 0 and self.trainer.global_step == 3:
            (ROOT / f"ready.{self.global_rank}").write_text(str(self.trainer.global_step))
            # SIGUSR1 arrives during this sleep; the handler saves and requeues, then the
            # requeue ends the job.
            time.sleep(120)
        return super().training_step(batch, batch_idx)

    def on_train_end(self) -> None:
        env = self.trainer.strategy.cluster_environment
        (ROOT / f"result.{self.global_rank}").write_text(
            json.dumps(
                {
                    "restart": RESTART,
                    "resumed_at": self.resumed_at,
                    "global_step": self.trainer.global_step,
                    "environment": type(env).__name__,
                    "world_size": self.trainer.world_size,
                    "rank": self.global_rank,
                }
            )
        )


def main() -> None:
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        num_nodes=1,
        strategy="ddp",
        max_steps=6,
        default_root_dir=ROOT,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Model())


if __name__ == "__main__":
    main()
