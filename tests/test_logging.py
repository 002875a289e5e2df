"""Logging of `agentfly fit`: the console bar (iteration, reward, KL, entropy, time per iteration,
tokens per second), CSV always with the per-phase timings, wandb offline (history, project and run
name, validation trajectories as a table), TensorBoard event files."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.fit_runs import fit_args, write_task


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    return write_task(tmp_path_factory.mktemp("logging"), [(1, 2), (3, 4), (5, 6), (7, 8)], n_val=2)


def wandb_records(path: Path) -> list:
    """The records of an offline run file (a LevelDB-style log: 7-byte header, 32 KiB blocks)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, block, buf, out = 7, 32768, b"", []
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        length, kind = int.from_bytes(data[pos + 4 : pos + 6], "little"), data[pos + 6]
        buf += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST: a whole record
            rec = pb.Record()
            rec.ParseFromString(buf)
            out.append(rec)
            buf = b""
    return out


def test_console_csv_wandb_offline_and_tensorboard(task, tmp_path):
    """One run, every logger: the console bar, CSV (always), wandb offline and TensorBoard (a
    dependency: ``tensorboard`` in ``trainer.logger`` writes event files holding the iterations'
    metrics)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    root, model = task
    run, wandb_dir = tmp_path / "run", tmp_path / "wandb"
    wandb_dir.mkdir()
    args = fit_args(root, model, run, 2, [
        "trainer.logger=['console','wandb','tensorboard']",
        "trainer.project_name=agentfly-test",
        "trainer.experiment_name=tiny-grpo",
        "trainer.n_gpus_per_node=2",  # a GPU request: on a machine without one, 1 CPU process
        "trainer.test_freq=1",
        "trainer.val_before_train=True",
    ])
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_DIR": str(wandb_dir), "WANDB_SILENT": "true"}
    proc = subprocess.run([sys.executable, "-m", "agentfly.cli", *args], capture_output=True, text=True, env=env, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout + proc.stderr
    if not torch.cuda.is_available():
        assert out.count("no GPU: running on the CPU") == 1
    for shown in ("Iteration", "2/2", "reward", "kl", "entropy", "s/it", "tok/s"):
        assert shown in out, shown

    [csv_file] = (run / "metrics").glob("version_*/metrics.csv")
    rows = [r for r in csv.DictReader(csv_file.open()) if r.get("training/iteration")]
    assert [float(r["training/iteration"]) for r in rows] == [1.0, 2.0]
    phases = ("rollout", "reference", "update", "weight_sync", "iteration")
    for row in rows:
        assert all(float(row[f"timing/{p}_s"]) > 0 for p in phases)
        assert float(row["timing/iteration_s"]) >= float(row["timing/rollout_s"]) + float(row["timing/update_s"])
        assert float(row["timing/tokens_per_s"]) > 0 and float(row["rollout/tokens_per_s"]) > 0

    [run_file] = wandb_dir.glob("wandb/offline-run-*/run-*.wandb")
    records = wandb_records(run_file)
    [info] = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert (info.project, info.display_name) == ("agentfly-test", "tiny-grpo")
    history = [{i.key or "/".join(i.nested_key): i.value_json for i in r.history.item} for r in records if r.WhichOneof("record_type") == "history"]
    assert [json.loads(h["training/iteration"]) for h in history if "training/iteration" in h] == [1, 2]
    assert any("training/reward/mean" in h and "timing/iteration_s" in h for h in history)
    assert any("val/val/reward" in h for h in history)
    tables = [h for h in history if json.loads(h.get("val/trajectories/_type", "null")) == "table-file"]
    assert len(tables) == 3  # before training and after each of the 2 iterations

    # the table holds the validation trajectories that were also written as JSONL
    [first] = sorted(run_file.parent.glob("files/media/table/val/trajectories_0_*.table.json"))
    table = json.loads(first.read_text())
    written = [json.loads(line) for line in (run / "trajectories" / "val_trajectories_iter000000.jsonl").read_text().splitlines()]
    assert len(table["data"]) == len(written) == 2
    col = table["columns"].index("response_text")
    assert [row[col] for row in table["data"]] == [w["response_text"] for w in written]

    assert list((run / "tensorboard").glob("events.out.tfevents.*"))
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    assert [e.value for e in events.Scalars("training/iteration")] == [1.0, 2.0]
    assert len(events.Scalars("training/reward/mean")) == 2
