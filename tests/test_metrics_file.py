"""A resumed fit continues the run's metrics file (agentfly.run.metrics_file): the rows of the
iterations its checkpoint does not hold go, its own rows follow with the next ``launch``."""

from __future__ import annotations

import csv
from pathlib import Path

from agentfly.run.metrics_file import RunCSVLogger, rows_up_to


def write(path: Path, rows: list[dict[str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    keys = sorted({k for r in rows for k in r})
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys)
        writer.writeheader()
        writer.writerows(rows)


def read(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


VAL0 = {"val/val/accuracy": "0.25", "step": "0"}
IT1, IT2, IT3 = ({"training/iteration": str(i), "step": str(i - 1)} for i in (1, 2, 3))
VAL2 = {"val/val/accuracy": "0.5", "step": "1"}


def test_a_checkpoint_holds_the_rows_up_to_its_iteration_and_the_validation_after_it():
    rows = [VAL0, IT1, IT2, VAL2, IT3]
    assert rows_up_to(rows, 0) == [VAL0]
    assert rows_up_to(rows, 2) == [VAL0, IT1, IT2, VAL2]
    assert rows_up_to(rows, 3) == rows


def test_a_resumed_launch_continues_the_newest_file_after_its_checkpoint(tmp_path: Path):
    # an earlier launch (before the launch column existed) logged 1-3; the checkpoint holds 2
    write(tmp_path / "metrics" / "version_0" / "metrics.csv", [VAL0, IT1, IT2, VAL2, IT3])
    (tmp_path / "metrics" / "version_0" / "hparams.yaml").write_text("{}\n")
    logger = RunCSVLogger(str(tmp_path), resume_iteration=2)
    assert logger.version == 0
    logger.log_metrics({"training/iteration": 3.0, "actor/lr": 0.1}, step=2)
    logger.save()
    rows = read(tmp_path / "metrics" / "version_0" / "metrics.csv")
    assert [(r["training/iteration"], r["launch"]) for r in rows] == [("", "1"), ("1", "1"), ("2", "1"), ("", "1"), ("3.0", "2")]
    assert rows[-1]["actor/lr"] == "0.1" and rows[2]["actor/lr"] == ""  # a new column, earlier rows blank
    assert not list((tmp_path / "metrics").glob("version_1"))


def test_a_fresh_launch_starts_a_new_version_and_leaves_the_old_file(tmp_path: Path):
    old = tmp_path / "metrics" / "version_0" / "metrics.csv"
    write(old, [IT1])
    logger = RunCSVLogger(str(tmp_path))
    logger.log_metrics({"training/iteration": 1.0}, step=0)
    logger.save()
    assert read(old) == [IT1]
    assert [(r["training/iteration"], r["launch"]) for r in read(tmp_path / "metrics" / "version_1" / "metrics.csv")] == [("1.0", "1")]


def test_a_resume_whose_checkpoint_has_no_rows_yet_is_still_a_later_launch(tmp_path: Path):
    # killed between the checkpoint of iteration 1 and Lightning's write of that iteration's
    # metrics: the checkpoint exists, the metrics file does not
    logger = RunCSVLogger(str(tmp_path), resume_iteration=1)
    logger.log_metrics({"training/iteration": 2.0}, step=1)
    logger.save()
    files = list((tmp_path / "metrics").glob("version_*/metrics.csv"))
    assert len(files) == 1
    assert [(r["training/iteration"], r["launch"]) for r in read(files[0])] == [("2.0", "2")]


def test_a_resume_after_a_launch_that_left_no_row_before_its_checkpoint_numbers_on(tmp_path: Path):
    # launch 1 logged iteration 1; launch 2 resumed, checkpointed 2 and died before its row
    path = tmp_path / "metrics" / "version_0" / "metrics.csv"
    write(path, [{**IT1, "launch": "1"}])
    logger = RunCSVLogger(str(tmp_path), resume_iteration=2)
    logger.log_metrics({"training/iteration": 3.0}, step=2)
    logger.save()
    assert [(r["training/iteration"], r["launch"]) for r in read(path)] == [("1", "1"), ("3.0", "2")]
