"""The run's metrics CSV: one file per run, which a resumed fit continues.

Lightning's ``CSVLogger`` starts a new ``version_N`` folder on every launch, so a run resumed
after a crash would leave two files, the iterations after the last checkpoint in both.
:class:`RunCSVLogger` instead continues the newest file of the run: the rows of the iterations the
checkpoint does not hold (logged after it was written) are dropped, and the new launch's rows
follow the checkpoint's. A ``launch`` column numbers the launches (1 for the first), so the
report can still tell this launch's time from the run's. A fresh launch (no checkpoint) starts a
new version, as Lightning's does, leaving any earlier file alone.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loggers.logger import rank_zero_experiment

from agentfly.run.report import metric_number, metrics_files, version_number

ITERATION = "training/iteration"
LAUNCH = "launch"


def newest_version(root: Path) -> int | None:
    """The highest ``version_N`` under ``root`` holding a ``metrics.csv`` (None: none)."""
    files = metrics_files(root)
    return version_number(files[-1]) if files else None


def rows_up_to(rows: list[dict[str, str]], iteration: int) -> list[dict[str, str]]:
    """The rows a checkpoint of ``iteration`` holds: every row logged while the last training row
    before it was of iteration ``iteration`` or earlier (validation rows belong to the iteration
    logged before them, 0 before training)."""
    kept, current = [], 0
    for row in rows:
        logged = metric_number(row.get(ITERATION))
        if logged is not None:
            current = int(logged)
        if current > iteration:
            break
        kept.append(row)
    return kept


class LaunchWriter(ExperimentWriter):
    """Lightning's CSV writer; every row it writes carries ``launch`` (1: a fresh launch's file)."""

    launch = 1

    def log_metrics(self, metrics_dict: dict[str, float], step: int | None = None) -> None:
        super().log_metrics({**metrics_dict, LAUNCH: self.launch}, step)


class ContinuedWriter(LaunchWriter):
    """Continues ``log_dir/metrics.csv`` after the rows of iterations up to ``iteration``
    instead of deleting it, as the launch after the last one there."""

    def __init__(self, log_dir: str, iteration: int) -> None:
        super().__init__(log_dir)
        path = Path(self.metrics_file_path)
        rows, keys = [], []
        if path.is_file():
            with path.open(newline="", encoding="utf-8") as f:
                reader = csv.DictReader(f)
                rows, keys = list(reader), list(reader.fieldnames or [])
        kept = rows_up_to(rows, iteration)
        # at least one launch came before: the one that wrote the checkpoint, whose rows may all be
        # missing (Lightning writes an iteration's metrics after on_train_batch_end, where the
        # checkpoint is saved, so a kill between the two leaves the checkpoint without its rows)
        self.launch = 1 + max((int(n) for r in kept if (n := metric_number(r.get(LAUNCH) or "1")) is not None), default=1)
        if not kept:
            path.unlink(missing_ok=True)
            return
        self.metrics_keys = sorted({*keys, LAUNCH})
        partial = path.with_name(path.name + ".partial")  # the old file stays whole until replaced
        with partial.open("w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=self.metrics_keys)
            writer.writeheader()
            writer.writerows({**r, LAUNCH: r.get(LAUNCH) or "1"} for r in kept)
        partial.replace(path)

    def _check_log_dir_exists(self) -> None:
        """The folder holds the run's file, which this writer continues (Lightning's deletes it)."""


class RunCSVLogger(CSVLogger):
    """``CSVLogger`` whose resumed fit continues the run's newest file (see the module).

    Args:
        save_dir, name: as ``CSVLogger``'s (the files are ``save_dir/name/version_N/metrics.csv``).
        resume_iteration: the iteration of the checkpoint this launch resumes from (a run with no
            metrics file yet starts one, its rows numbered as a later launch's); None: a fresh
            launch, which starts a new version.
    """

    def __init__(self, save_dir: str, name: str = "metrics", resume_iteration: int | None = None, **kwargs: Any) -> None:
        version = newest_version(Path(save_dir) / name) if resume_iteration is not None else None
        super().__init__(save_dir, name=name, version=version, **kwargs)
        self.resume_iteration = resume_iteration

    @property
    @rank_zero_experiment
    def experiment(self) -> LaunchWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            fresh = self.resume_iteration is None
            self._experiment = LaunchWriter(self.log_dir) if fresh else ContinuedWriter(self.log_dir, self.resume_iteration)
        return self._experiment
