"""What both workers share: the gate protocol with ``bench/run.py``, memory sampling and
``cuda_sync`` (also used by the runner's machine probe in ``hardware.py``).

The parent writes ``go`` (run one more iteration), ``trim`` (this worker's turn is over) or
``quit`` on the worker's stdin; the worker prints one ``@@BENCH {json}`` line per event on stdout
(everything else there is log).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from typing import Any

PREFIX = "@@BENCH "


def emit(event: str, **data: Any) -> None:
    sys.stdout.write(PREFIX + json.dumps({"event": event, **data}) + "\n")
    sys.stdout.flush()


def wait_go(before_trim: Any = None) -> bool:
    """Block until the parent says ``go`` (True) or ``quit`` / closes stdin (False).

    ``trim``, sent when this worker's turn ends and before another system runs, hands freed heap
    back to the OS (answered by a ``trimmed`` event) so idle workers do not hold memory the
    running one needs. It is not done between iterations: the next iteration would page that
    memory back in, a cost no training run pays (figures in bench/README.md). ``before_trim``
    runs first (an agentfly worker that rolls out ahead lets its rollouts in flight end, so
    that none runs during another system's turn); the ``trimmed`` event's ``drained_s`` is the
    time it took, work done for the next turn's iterations, which the parent counts in them.
    """
    while True:
        word = sys.stdin.readline().strip()
        if word != "trim":
            return word == "go"
        started = time.perf_counter()
        if before_trim is not None:
            before_trim()
        drained = time.perf_counter() - started
        trim_memory()
        emit("trimmed", drained_s=round(drained, 4))


def trim_memory() -> None:
    """Hand freed heap back to the OS between iterations (glibc keeps it otherwise)."""
    import ctypes
    import gc

    gc.collect()
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _uses_cuda() -> bool:
    """Whether this process has started CUDA (a CPU worker never touches the GPU)."""
    import torch

    return torch.cuda.is_available() and torch.cuda.is_initialized()


def cuda_sync() -> None:
    """Wait for queued GPU work, so a wall-clock reading covers it (no-op without CUDA)."""
    if _uses_cuda():
        import torch

        torch.cuda.synchronize()


class PeakRSS:
    """Samples the RSS of this process and its children (engine processes) every 0.2 s, and
    reads this process's peak GPU memory (what torch's allocator reserved) when it uses CUDA."""

    def __init__(self) -> None:
        import psutil

        self._proc = psutil.Process(os.getpid())
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _tree_rss(self) -> int:
        total = 0
        try:
            procs = [self._proc, *self._proc.children(recursive=True)]
        except Exception:
            return 0
        for p in procs:
            with contextlib.suppress(Exception):
                total += p.memory_info().rss
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._tree_rss())
            time.sleep(0.2)

    def reset(self) -> None:
        self.peak = self._tree_rss()
        if _uses_cuda():
            import torch

            torch.cuda.reset_peak_memory_stats()

    def gib(self) -> float:
        return round(self.peak / 2**30, 2)

    def gpu_gib(self) -> float | None:
        if not _uses_cuda():
            return None
        import torch

        return round(torch.cuda.max_memory_reserved() / 2**30, 2)


class PhaseClock:
    """Accumulates wall time per named phase (``with clock("update"): ...``)."""

    def __init__(self) -> None:
        self.times: dict[str, float] = {}

    def __call__(self, name: str):
        clock = self

        class _Ctx:
            def __enter__(self):
                self.start = time.perf_counter()

            def __exit__(self, *exc):
                clock.times[name] = clock.times.get(name, 0.0) + time.perf_counter() - self.start

        return _Ctx()

    def take(self) -> dict[str, float]:
        out, self.times = self.times, {}
        return out
