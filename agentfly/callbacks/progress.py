"""The console progress bar, counted in RL iterations.

Lightning's bar counts batches of an epoch; here one batch is one iteration and there is one
endless epoch, so the bar shows ``Iteration k/total`` with the module's progress-bar metrics
(reward, KL, entropy, seconds per iteration, tokens per second) and without ``v_num``.

Tool calls failed for the infrastructure (timeouts, dead workers: see
:mod:`agentfly.rollout.tools.breaker`) show as ``tool failures: n`` (the run's count) as they
happen: the rollout runs inside an iteration, where Lightning does not redraw the bar, so a
thread looks at the count every :data:`WATCH_S` seconds and redraws it when it has changed.

Where the output is not a terminal (``nohup``, a log file, CI, ``srun``) a bar redraws in place
and a log file gets it once, at the end; :class:`IterationLines` prints one plain line per
iteration instead (the bar's metrics, the elapsed time and an ETA), and one per validation.
"""

from __future__ import annotations

import contextlib
import math
import re
import sys
import threading
import time
from typing import Any

from lightning.pytorch.callbacks import ProgressBar, RichProgressBar, TQDMProgressBar
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


def _clock(seconds: float) -> str:
    h, rest = divmod(round(seconds), 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


#: validation metrics a line names: each data source's reward, accuracy and success rate
VAL_SHOWN = re.compile(r"^val[^/]*/.+/(reward|accuracy|acc|success_rate)$")


class IterationLines(ProgressBar):
    """One plain line per iteration and per validation, for output that is not a terminal::

        Iteration 3/40 | reward 0.42 | s/it 21.3 | tok/s 812 | elapsed 1:04 | ETA 13:25
    """

    def __init__(self, total_iterations: int, stream: Any = None) -> None:
        super().__init__()
        self.total_iterations = total_iterations
        self.stream = stream
        self._enabled = True
        self._started: float | None = None
        self._first: int | None = None  # the iteration this launch started after (a resume: > 0)
        self._failed_before = 0

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    def _print(self, line: str) -> None:
        if self._enabled:
            print(line, file=self.stream or sys.stdout, flush=True)

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._started = time.perf_counter()
        self._first = int(getattr(pl_module, "iteration", 0))
        self._failed_before = failed_calls()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        k = int(getattr(pl_module, "iteration", trainer.global_step))
        metrics = self.get_metrics(trainer, pl_module)
        metrics.pop("v_num", None)
        if failed := failed_calls() - self._failed_before:
            metrics[FAILURES] = failed
        cells = [f"{DESCRIPTION} {k}/{self.total_iterations}"]
        cells += [f"{name} {value:.4g}" if isinstance(value, float) else f"{name} {value}"
                  for name, value in metrics.items()]
        if self._started is not None and self._first is not None and k > self._first:
            elapsed = time.perf_counter() - self._started
            left = max(0, self.total_iterations - k) * elapsed / (k - self._first)
            cells += [f"elapsed {_clock(elapsed)}", f"ETA {_clock(left)}"]
        self._print(" | ".join(cells))

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        shown = {k: float(v) for k, v in trainer.callback_metrics.items() if VAL_SHOWN.match(k)}
        shown = {k: v for k, v in shown.items() if not math.isnan(v)}
        if shown:
            k = int(getattr(pl_module, "iteration", trainer.global_step))
            self._print(f"Validation after iteration {k} | " + " | ".join(f"{n} {v:.4g}" for n, v in sorted(shown.items())))


def iteration_progress_bar(total_iterations: int) -> ProgressBar:
    """Rich when installed (as Lightning's default), else tqdm; plain lines when stdout is not a
    terminal (:class:`IterationLines`)."""
    if not sys.stdout.isatty():
        return IterationLines(total_iterations)
    cls = RichIterationBar if _RICH_AVAILABLE else TQDMIterationBar
    return cls(total_iterations)
