"""A failure planted in a fit: ``--trainer.callbacks+=tests.planted.Fail [--trainer.callbacks.hook H]``."""

from __future__ import annotations

import os
import signal

import lightning.pytorch as pl


class Fail(pl.Callback):
    """Raises ``RuntimeError("planted failure")`` at ``hook``: ``fit_start`` (before any
    iteration) or ``train_batch_end`` (after the first training step); ``sigterm`` sends this
    process SIGTERM after the first training step instead."""

    def __init__(self, hook: str = "fit_start") -> None:
        self.hook = hook

    def on_fit_start(self, trainer, pl_module) -> None:
        if self.hook == "fit_start":
            raise RuntimeError("planted failure")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.hook == "train_batch_end":
            raise RuntimeError("planted failure")
        if self.hook == "sigterm":
            os.kill(os.getpid(), signal.SIGTERM)


class Bug(pl.Callback):
    """Raises a plain ``KeyError`` or ``ValueError`` (``kind``) as the fit starts: a bug in the code
    (not a config error), which the command line shows with its traceback."""

    def __init__(self, kind: str = "KeyError") -> None:
        self.kind = kind

    def on_fit_start(self, trainer, pl_module) -> None:
        raise {"KeyError": KeyError, "ValueError": ValueError}[self.kind]("planted bug")
