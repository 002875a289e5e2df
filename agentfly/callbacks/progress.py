"""The console progress bar, counted in RL iterations.

Lightning's bar counts batches of an epoch; here one batch is one iteration and there is one
endless epoch, so the bar shows ``Iteration k/total`` with the module's progress-bar metrics
(reward, KL, entropy, seconds per iteration, tokens per second) and without ``v_num``.

Tool calls failed for the infrastructure (timeouts, dead workers: see
:mod:`agentfly.rollout.tools.breaker`) show as ``tool failures: n`` (the run's count) as they
happen: the rollout runs inside an iteration, where Lightning does not redraw the bar, so a
thread looks at the count every :data:`WATCH_S` seconds and redraws it when it has changed.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

from lightning.pytorch.callbacks import RichProgressBar, TQDMProgressBar
from lightning.pytorch.utilities.imports import _RICH_AVAILABLE

from agentfly.rollout.tools.breaker import failed_calls

DESCRIPTION = "Iteration"
FAILURES = "tool failures"
WATCH_S = 1.0


class _IterationBar:
    total_iterations: int
    _failed_before = 0
    _shown: dict[str, Any] | None = None
    _stop: threading.Event | None = None

    @property
    def total_train_batches(self) -> int:
        return self.total_iterations

    def get_metrics(self, trainer: Any, pl_module: Any) -> dict[str, Any]:
        items = super().get_metrics(trainer, pl_module)  # type: ignore[misc]
        items.pop("v_num", None)
        if failed := failed_calls() - self._failed_before:
            items[FAILURES] = failed
        self._shown = dict(items)
        return items

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        super().on_train_start(trainer, pl_module)  # type: ignore[misc]
        self._failed_before = failed_calls()
        self._stop = threading.Event()
        threading.Thread(
            target=self._watch, args=(self._stop,), name="agentfly-progress", daemon=True
        ).start()

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._end_watch()
        super().on_train_end(trainer, pl_module)  # type: ignore[misc]

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._end_watch()
        super().on_exception(trainer, pl_module, exception)  # type: ignore[misc]

    def _end_watch(self) -> None:
        if self._stop is not None:
            self._stop.set()

    def _watch(self, stop: threading.Event) -> None:
        shown = failed_calls() - self._failed_before
        while not stop.wait(WATCH_S):
            failed = failed_calls() - self._failed_before
            if failed != shown:
                shown = failed
                with contextlib.suppress(Exception):  # a bar torn down meanwhile
                    self._redraw({**(self._shown or {}), FAILURES: failed})

    def _redraw(self, metrics: dict[str, Any]) -> None:
        raise NotImplementedError


class RichIterationBar(_IterationBar, RichProgressBar):
    def __init__(self, total_iterations: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.total_iterations = total_iterations

    def _get_train_description(self, current_epoch: int) -> str:  # Lightning's hook for "Epoch x"
        return DESCRIPTION

    def _redraw(self, metrics: dict[str, Any]) -> None:
        if self._metric_component is not None:
            self._metric_component.update(metrics)
            self.refresh()


class TQDMIterationBar(_IterationBar, TQDMProgressBar):
    def __init__(self, total_iterations: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.total_iterations = total_iterations

    def on_train_epoch_start(self, trainer: Any, *args: Any) -> None:
        super().on_train_epoch_start(trainer, *args)
        self.train_progress_bar.set_description(DESCRIPTION)

    def _redraw(self, metrics: dict[str, Any]) -> None:
        if self._train_progress_bar is not None:
            self._train_progress_bar.set_postfix(metrics)


def iteration_progress_bar(total_iterations: int) -> RichProgressBar | TQDMProgressBar:
    """Rich when installed (as Lightning's default), else tqdm."""
    cls = RichIterationBar if _RICH_AVAILABLE else TQDMIterationBar
    return cls(total_iterations)
