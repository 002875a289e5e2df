"""The progress bar shows tool failures as they happen, between Lightning's redraws."""

from __future__ import annotations

import io
import threading
import time

from tqdm import tqdm

from agentfly.callbacks import progress
from agentfly.callbacks.progress import FAILURES, TQDMIterationBar
from agentfly.rollout.tools.breaker import ToolBreakers, failed_calls


def test_the_bar_redraws_the_run_s_tool_failures_while_a_rollout_runs(monkeypatch):
    """Two tool failures during an iteration (no Lightning redraw): within a watch period the
    bar's postfix shows ``tool failures=2`` beside the metrics it showed; an answered call (a
    raise of the tool) changes nothing."""
    monkeypatch.setattr(progress, "WATCH_S", 0.05)
    out = io.StringIO()
    bar = TQDMIterationBar(3)
    bar._train_progress_bar = tqdm(total=3, file=out, mininterval=0)
    bar._failed_before = failed_calls()
    bar._shown = {"reward": 0.5}
    stop = threading.Event()
    watch = threading.Thread(target=bar._watch, args=(stop,), daemon=True)
    watch.start()
    board = ToolBreakers(first_calls=0, window=0, failure_rate=1.0)
    for kind in ("exception", "timeout", "worker_died"):
        board.record("calc", board.start("calc"), kind, f"Error: {kind}")
    deadline = time.monotonic() + 5
    while f"{FAILURES}=2" not in out.getvalue():
        assert time.monotonic() < deadline, out.getvalue()
        time.sleep(0.02)
    stop.set()
    watch.join(2)
    assert "reward=0.5" in out.getvalue().rsplit("\r", 1)[-1]


def test_without_a_terminal_each_iteration_and_validation_prints_one_line(task, tmp_path, capsys):
    """stdout captured (not a TTY), as under nohup, CI or srun: one line per iteration with the
    bar's metrics, the elapsed time and an ETA, and one per validation; no bar redraws."""
    import re

    from agentfly.cli import main
    from tests.fit_runs import fit_args

    root, model = task
    args = fit_args(root, model, tmp_path / "run", 2, ["trainer.logger=[console,csv]", "trainer.test_freq=1"])
    assert main(args) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("Iteration ")]
    assert [line.split(" | ")[0] for line in lines] == ["Iteration 1/2", "Iteration 2/2"], out[-2000:]
    assert all(re.search(r"\| reward [-\d.e]+ .*\| elapsed \d+:\d\d \| ETA \d+:\d\d$", line) for line in lines), lines
    assert lines[-1].endswith("ETA 0:00")
    validations = [line for line in out.splitlines() if line.startswith("Validation after iteration ")]
    assert [v.split(" | ")[0] for v in validations][:2] == ["Validation after iteration 1", "Validation after iteration 2"]
    assert all("/reward " in v for v in validations), validations
    assert "\r" not in out
