"""Starting a pool's workers: forked from the fork server, and what a failed start means.

Workers are forked by one fork server (:mod:`~agentfly.rollout.execution.forkserver`), which
imports the plugins and preloads once. Where it cannot fork (its imports initialised CUDA), and
for the rest of the pool's life once a forked worker failed to start (a plug-in's thread held a
lock at the fork, say), each worker starts from scratch and imports them itself
(:func:`~agentfly.rollout.execution.worker_process.spawn`).

A start fails in one of two ways, and they are told apart:

- an import raised (the plug-in or a preload cannot be imported: a missing dependency, an error
  in its code). Every start would fail alike, so the first one stops the pool:
  :class:`WorkerStartError`, naming the plug-ins and quoting the error;
- the start was late (``start_timeout``) or its process died. That is the machine's load as often
  as not, so the start is tried again, with twice the deadline each time; only
  :data:`START_ATTEMPTS` such failures in a row, with no start between them, stop the pool.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterable

from agentfly.rollout.execution.forkserver import ForkServer, ForkServerLost
from agentfly.rollout.execution.worker_errors import WorkerStartError
from agentfly.rollout.execution.worker_process import (
    Worker,
    exit_description,
    read_last_stderr,
    spawn,
)

logger = logging.getLogger("agentfly.rollout.execution.workers")

START_ATTEMPTS = 3  # late or dead starts in a row before the pool gives up


class StartAttempts:
    """Failed starts in a row, and the deadline of the next start (pure bookkeeping).

    Args:
        start_timeout: the first attempt's deadline in seconds; each late or dead start in a row
            doubles it.
        attempts: such failures in a row that stop the pool.
    """

    def __init__(self, start_timeout: float, attempts: int = START_ATTEMPTS) -> None:
        self.start_timeout = float(start_timeout)
        self.attempts = int(attempts)
        self.failures = 0

    @property
    def timeout(self) -> float:
        """The next start's deadline in seconds."""
        return self.start_timeout * 2**self.failures

    def started(self) -> None:
        self.failures = 0

    def failed(self) -> bool:
        """Count a late or dead start; whether the pool must give up now."""
        self.failures += 1
        return self.failures >= self.attempts


class Starter:
    """The fork server and the starts of one pool's workers."""

    def __init__(
        self,
        memory_mb: int,
        max_reply_bytes: int,
        plugins: list[str],
        preload: list[str],
        start_timeout: float,
    ) -> None:
        self.memory_mb = memory_mb
        self.max_reply_bytes = max_reply_bytes
        self.plugins = plugins
        self.preload = preload
        self.attempts = StartAttempts(start_timeout)
        self.server: ForkServer | None = None
        self.fork = True  # False once a forked worker failed to start
        self.error: WorkerStartError | None = None  # the pool cannot start workers

    def ready(self) -> bool:
        """Whether :meth:`spawn` can start a worker now: the fork server is up (started here
        when there is none)."""
        if self.error is not None:
            return False
        if self.server is None:
            self.server = ForkServer(self.plugins, self.preload, self.attempts.timeout)
        return self.server.state == "ready"

    def spawn(self) -> Worker:
        """A new worker, forked when the server can fork, else started from scratch."""
        timeout = self.attempts.timeout
        assert self.server is not None
        if self.server.forks and self.fork:
            try:
                proc = self.server.fork(self.memory_mb, self.max_reply_bytes)
                return Worker(proc, time.monotonic() + timeout)
            except ForkServerLost as e:
                logger.warning("%s; starting a worker from scratch", e)
        return spawn(self.memory_mb, self.max_reply_bytes, self.plugins, self.preload, timeout)

    def fds(self) -> list[int]:
        """What the pool's ``select`` watches for the server."""
        return self.server.fds() if self.server is not None else []

    def io(self, readable: list[int]) -> None:
        """Read what the server sent or wrote to stderr (its start, exit reports)."""
        server = self.server
        if server is None or server.state == "gone":
            return
        if server.proc.stderr.fileno() in readable:  # type: ignore[union-attr]
            server.read_stderr()
        if server.sock.fileno() in readable:
            server.read()

    def step(self, now: float) -> None:
        """The server's start: failed (the pool gives up), late or dead (tried again); a server
        lost after its start is started again when next needed."""
        server = self.server
        if server is None or self.error is not None:
            return
        server.read()
        if server.state == "failed":
            self._give_up(f"it raised while starting: {server.failure}", server.stderr_tail)
        elif server.state == "starting" and now >= server.start_deadline:
            self._drop_server()
            self.failed(
                f"the fork server did not report ready within {self.attempts.timeout:g} s",
                server.stderr_tail,
            )
        elif server.state == "gone":
            self._drop_server()
            if not server.was_ready:
                how = exit_description(server.proc.returncode or 0)
                self.failed(f"the fork server exited while starting ({how})", server.stderr_tail)

    def started(self) -> None:
        """A worker said ready."""
        self.attempts.started()

    def failed(self, why: str, stderr_tail: Iterable[bytes] = ()) -> None:
        """A late or dead start: tried again (twice the deadline), or the pool gives up."""
        if self.attempts.failed():
            self._give_up(
                f"{why} ({self.attempts.failures} late or dead starts in a row)", stderr_tail
            )
        else:
            logger.warning(
                "a tool/reward worker did not start (%s); trying again with a %g s deadline",
                why,
                self.attempts.timeout,
            )

    def worker_failed(self, w: Worker, why: str, raised: bool) -> None:
        """``w`` (discarded) did not start: an import or a limit raised in it (``raised``: every
        start would fail alike, the pool gives up), or it was late or died (:meth:`failed`)."""
        read_last_stderr(w)
        if w.forked and not raised and self.fork:
            self.fork = False
            logger.warning(
                "a forked tool/reward worker did not start (%s): workers start from "
                "scratch from now on",
                why,
            )
        if raised:
            self._give_up(why, w.stderr_tail)
        else:
            self.failed(why, w.stderr_tail)

    def _give_up(self, why: str, stderr_tail: Iterable[bytes]) -> None:
        tail = b"".join(stderr_tail).decode("utf-8", "replace").strip()
        plugins = f" (plugins: {', '.join(self.plugins)})" if self.plugins else ""
        self.error = WorkerStartError(
            f"the tool/reward worker processes ({sys.executable} -m "
            f"agentfly.rollout.execution.forkserver_main and the workers it forks){plugins} "
            f"failed to start: {why}."
            + (f" Its stderr ended with:\n{tail}" if tail else " It wrote nothing to stderr.")
        )

    def _drop_server(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None

    def close(self) -> None:
        self._drop_server()
