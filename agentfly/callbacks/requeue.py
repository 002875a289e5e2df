"""SLURM auto-requeue at an iteration boundary.

``#SBATCH --signal=USR1@120`` warns a job before its time limit. Lightning's own handler saves a
checkpoint *inside the signal handler*, wherever each rank happens to be; with several ranks one
may be inside a collective (a gradient all-reduce, an FSDP all-gather) while another enters the
checkpoint's barrier, and the job hangs. Here the handler only notes the signal; at the end of the
iteration (every rank at the same point, after the weight sync) the ranks agree whether any of
them was signalled, all save ``hpc_ckpt_N.ckpt`` together (to a temporary name moved into place,
so a job killed mid-write never leaves a partial one), rank 0 runs ``scontrol requeue``, and
training stops. The requeued job's ``agentfly fit ... trainer.resume_mode=auto`` resumes from that
checkpoint (:func:`agentfly.run.fit.resume_path` picks it when it is the newest).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback

from agentfly.callbacks.iterations import replace_durably

logger = logging.getLogger(__name__)


class SlurmRequeue(Callback):
    """On SIGUSR1 (or ``requeue_signal``): checkpoint at the next iteration end, requeue, stop."""

    def __init__(self, requeue_signal: int = signal.SIGUSR1) -> None:
        self.requeue_signal = requeue_signal
        self.signalled = False

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        signal.signal(self.requeue_signal, self._note)

    def _note(self, signum: int, frame: Any) -> None:
        self.signalled = True

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        flag = torch.tensor(1.0 if self.signalled else 0.0, device=trainer.strategy.root_device)
        if trainer.world_size > 1:  # every rank calls this at the same point: safe to agree here
            flag = trainer.strategy.reduce(flag, reduce_op="sum")
        if float(flag) == 0:
            return
        path = trainer._checkpoint_connector.hpc_save_path(trainer.default_root_dir)
        # a name without "hpc_ckpt_": neither Lightning's hpc_ckpt_N numbering nor a resume
        # (agentfly.run.checkpoints) takes it for a checkpoint until it is whole and moved into place
        tmp = os.path.join(os.path.dirname(path), ".hpc_partial.tmp")
        trainer.save_checkpoint(tmp)  # every rank; rank 0 writes
        if trainer.is_global_zero:
            replace_durably(tmp, path)
            job = os.environ.get("SLURM_JOB_ID", "")
            if os.environ.get("SLURM_ARRAY_JOB_ID"):
                job = f"{os.environ['SLURM_ARRAY_JOB_ID']}_{os.environ['SLURM_ARRAY_TASK_ID']}"
            result = subprocess.call(["scontrol", "requeue", job]) if job else 1
            if result == 0:
                logger.warning("SLURM signal: saved %s after iteration %d and requeued job %s", path, pl_module.iteration, job)
            else:
                logger.warning("SLURM signal: saved %s; requeuing job %r failed (%s)", path, job, result)
        trainer.should_stop = True
