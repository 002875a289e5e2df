"""Writes the run's config into every checkpoint, so that a resume can compare the config it is
given with the one the checkpoint was written with (:mod:`agentfly.run.resume`)."""

from __future__ import annotations

from typing import Any

from lightning.pytorch.callbacks import Callback

RECORD_KEY = "agentfly_config"  # the checkpoint's entry holding the run's config


class ConfigRecord(Callback):
    """Adds ``record`` (:func:`agentfly.run.resume.config_record` of the run's config) to each
    checkpoint under :data:`RECORD_KEY`."""

    def __init__(self, record: dict[str, Any]) -> None:
        self.record = record

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        checkpoint[RECORD_KEY] = dict(self.record)
