"""A callback that presses Ctrl-C from inside a fit, at a chosen point of a chosen iteration
(``--trainer.callbacks+=tests.interrupts.CtrlCAt --trainer.callbacks.iteration 2
--trainer.callbacks.at start``): the signal reaches the process's own handler exactly there."""

from __future__ import annotations

import os
import signal
from typing import Any

import lightning.pytorch as pl


class CtrlCAt(pl.Callback):
    """SIGINT to this process when iteration ``iteration`` starts (``at="start"``: its rollout is
    in, its update about to run) or in the validation after it (``at="validation"``: between
    iterations, its metrics logged)."""

    def __init__(self, iteration: int, at: str = "validation", signal_name: str = "SIGINT") -> None:
        self.iteration, self.at, self.signum = iteration, at, getattr(signal, signal_name)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if self.at == "start" and pl_module.iteration + 1 == self.iteration:
            os.kill(os.getpid(), self.signum)

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        if self.at == "validation" and trainer.state.fn == "fit" and pl_module.iteration == self.iteration:
            os.kill(os.getpid(), self.signum)
