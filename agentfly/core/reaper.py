"""Kills the Ray processes a trainer started once the trainer is gone, however it went.

A trainer that ends in order stops its Ray itself (:func:`agentfly.core.shutdown.stop_ray`). One that
is SIGKILLed (the kernel's OOM killer, ``kill -9``) cannot, and Ray's head processes follow it,
but its dashboard and runtime-env agents do not (they outlived such a trainer by more than a
minute). :func:`agentfly.core.shutdown.on_ray_started` starts this module as a small process of its
own session: every ``interval_s`` it notes the trainer's descendants that are Ray's; when the
trainer has exited it kills those still running. ``stop_ray`` ends it with the Ray it watches.

Run as ``python -m agentfly.core.reaper TRAINER_PID``.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time

import psutil

RAY_NAMES = ("ray::", "raylet", "gcs_server")


def is_ray_process(proc: psutil.Process) -> bool:
    """Whether ``proc`` is one of Ray's: its program lives in the ``ray`` package, or Ray named it."""
    cmdline = " ".join(proc.cmdline())
    return "/ray/" in cmdline or cmdline.startswith("ray::") or proc.name().startswith(RAY_NAMES)


def ray_descendants(proc: psutil.Process) -> list[psutil.Process]:
    """The descendants of ``proc`` that are Ray's (vanished ones skipped)."""
    found = []
    for child in proc.children(recursive=True):
        try:
            if child.pid != os.getpid() and is_ray_process(child):
                found.append(child)
        except psutil.Error:
            continue
    return found


def gone(proc: psutil.Process) -> bool:
    """Whether ``proc`` has ended (a zombie counts as ended)."""
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def watch(trainer_pid: int, interval_s: float = 1.0) -> list[int]:
    """Note the Ray processes under ``trainer_pid`` until it exits, then kill those left.

    Returns:
        The process ids killed.
    """
    try:
        trainer = psutil.Process(trainer_pid)
    except psutil.Error:
        return []
    seen: dict[int, psutil.Process] = {}
    while not gone(trainer):
        with contextlib.suppress(psutil.Error):
            seen.update((p.pid, p) for p in ray_descendants(trainer))
        time.sleep(interval_s)
    left = [p for p in seen.values() if not gone(p)]  # is_running() also checks the start time
    for proc in left:
        try:
            proc.kill()
        except psutil.Error:
            continue
    return [p.pid for p in left]


def main(argv: list[str]) -> int:
    killed = watch(int(argv[0]))
    if killed:
        print(f"agentfly.core.reaper: trainer {argv[0]} is gone; killed its Ray processes {killed}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
