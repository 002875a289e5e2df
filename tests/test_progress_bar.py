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
