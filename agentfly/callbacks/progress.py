"""The console progress bar, counted in RL iterations.

Lightning's bar counts batches of an epoch; here one batch is one iteration and there is one
endless epoch, so the bar shows ``Iteration k/total`` with the module's progress-bar metrics
(reward, KL, entropy, seconds per iteration, tokens per second) and without ``v_num``.
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch.callbacks import RichProgressBar, TQDMProgressBar
from lightning.pytorch.utilities.imports import _RICH_AVAILABLE

DESCRIPTION = "Iteration"


class _IterationBar:
    total_iterations: int

    @property
    def total_train_batches(self) -> int:
        return self.total_iterations

    def get_metrics(self, trainer: Any, pl_module: Any) -> dict[str, Any]:
        items = super().get_metrics(trainer, pl_module)  # type: ignore[misc]
        items.pop("v_num", None)
        return items


class RichIterationBar(_IterationBar, RichProgressBar):
    def __init__(self, total_iterations: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.total_iterations = total_iterations

    def _get_train_description(self, current_epoch: int) -> str:  # Lightning's hook for "Epoch x"
        return DESCRIPTION


class TQDMIterationBar(_IterationBar, TQDMProgressBar):
    def __init__(self, total_iterations: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.total_iterations = total_iterations

    def on_train_epoch_start(self, trainer: Any, *args: Any) -> None:
        super().on_train_epoch_start(trainer, *args)
        self.train_progress_bar.set_description(DESCRIPTION)


def iteration_progress_bar(total_iterations: int) -> RichProgressBar | TQDMProgressBar:
    """Rich when installed (as Lightning's default), else tqdm."""
    cls = RichIterationBar if _RICH_AVAILABLE else TQDMIterationBar
    return cls(total_iterations)
