"""Environments that fail on purpose, for the ProcessEnv tests and the chains' (imported in the
env process)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any

from agentfly.envs.base import Env, EnvUsageError, StepResult


class CountingEnv(Env):
    """Counts its steps; ``hang`` sleeps forever, ``nap`` a second, ``crash`` kills the process, ``raise`` raises,
    ``usage`` is a caller mistake. ``reset`` with ``fail=True`` raises. It starts a child
    (a sleeping process, standing for a Java or engine process) and reports its pid. ``close``
    writes a file named by its process id into ``$COUNTING_ENV_CLOSED_DIR`` when that is set."""

    def __init__(self) -> None:
        super().__init__(max_steps=None)
        self.child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])

    def _reset(self, task: dict[str, Any], seed: int | None) -> tuple[str, dict[str, Any]]:
        if task.get("fail"):
            raise KeyError("no such level")
        return "start", {"goal": "count", "child_pid": self.child.pid}

    def _step(self, action: str) -> StepResult:
        began = time.time()
        if action == "hang":
            time.sleep(3600)
        if action == "nap":
            time.sleep(1.0)
        if action == "crash":
            os.kill(os.getpid(), signal.SIGKILL)
        if action == "raise":
            raise ValueError("the simulator broke")
        if action == "usage":
            raise EnvUsageError("not an action here")
        return StepResult(f"step {self.steps + 1}", 1.0, info={"pid": os.getpid(), "began": began, "ended": time.time()})

    def close(self) -> None:
        self.child.kill()
        self.child.wait()
        if os.environ.get("COUNTING_ENV_CLOSED_DIR"):  # say it was closed (not killed)
            open(os.path.join(os.environ["COUNTING_ENV_CLOSED_DIR"], str(os.getpid())), "w").close()
