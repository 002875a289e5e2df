"""Logs the validation trajectories the data module kept (also written as JSONL) to wandb as a table."""

from __future__ import annotations

import json
from typing import Any

from lightning.pytorch.callbacks import Callback

COLUMNS = (
    "iteration", "data_source", "messages", "response_text", "final_response", "reward",
    "num_turns", "num_tool_calls", "finish_reason",
)


def _cell(value: Any) -> Any:
    return value if value is None or isinstance(value, str | int | float | bool) else json.dumps(value)


class ValTrajectoryTable(Callback):
    """After each validation, one ``val/trajectories`` table per wandb logger (rank 0 logs)."""

    def on_validation_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        from lightning.pytorch.loggers import WandbLogger

        datamodule = getattr(trainer, "datamodule", None)
        records = list(getattr(datamodule, "val_samples", []) or [])
        if datamodule is not None and hasattr(datamodule, "val_samples"):
            datamodule.val_samples = []
        loggers = [lg for lg in trainer.loggers if isinstance(lg, WandbLogger)]
        if not records or not loggers or not trainer.is_global_zero:
            return
        iteration = int(getattr(pl_module, "iteration", 0))
        rows = []
        for rec in records:
            source = (rec.get("row") or {}).get("data_source", "val")
            values = {**rec, "iteration": iteration, "data_source": source}
            rows.append([_cell(values.get(c)) for c in COLUMNS])
        for lg in loggers:
            lg.log_table(key="val/trajectories", columns=list(COLUMNS), data=rows)
