"""The pool's side of the fork server (:mod:`~agentfly.rollout.execution.forkserver_main`): the
process that imports the plugins once and forks each worker, and the forked worker as the pool
sees it.

A forked worker is the fork server's child, not the trainer's: its exit status reaches the pool
as the server's ``("exit", pid, code)`` message (:meth:`ForkedProcess.wait`), and the server
reaps it. The pool forks nothing from a server whose imports initialised CUDA (a forked process
cannot use it), nor after a forked worker failed to start (a lock held by a thread a plug-in
started, copied locked into the child): it starts each worker from scratch then
(:mod:`~agentfly.rollout.execution.worker_starts`).
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import pickle
import select
import socket
import subprocess
import sys
import time

from agentfly.rollout.execution.forkserver_main import MESSAGE_BYTES
from agentfly.rollout.execution.worker_process import STDERR_TAIL_BYTES, kill_group, nonblocking

FORK_REPLY_S = 5.0  # the server's answer to a fork request, at most
MAX_EXITS_KEPT = 1024  # exit reports kept for a wait that may come


class ForkServerLost(RuntimeError):
    """The fork server is gone or does not answer."""


class ForkedProcess:
    """A worker forked by a :class:`ForkServer`: the part of :class:`subprocess.Popen` the pool
    uses (``pid``, the three pipes, :meth:`wait`)."""

    def __init__(self, pid: int, stdin: int, stdout: int, stderr: int, server: ForkServer) -> None:
        self.pid = pid
        self.stdin = os.fdopen(stdin, "wb", buffering=0)
        self.stdout = os.fdopen(stdout, "rb", buffering=0)
        self.stderr = os.fdopen(stderr, "rb", buffering=0)
        self.server = server
        self.returncode: int | None = None

    def wait(self, timeout: float | None = None) -> int:
        """Its exit code, as the server reports it; ``subprocess.TimeoutExpired`` past
        ``timeout`` (or when the server is gone: the worker then kills itself)."""
        code = self.server.exit_code(self.pid, 0.0 if timeout is None else timeout)
        if code is None:
            raise subprocess.TimeoutExpired(f"forked worker {self.pid}", timeout or 0.0)
        self.returncode = code
        return code


class ForkServer:
    """One fork server process (see the module docstring).

    Attributes:
        state: ``starting`` (importing), ``ready``, ``failed`` (an import raised: ``failure``
            says what) or ``gone`` (it exited, or closed its socket).
        was_ready: it said ready (before it was gone, if it is).
        forks: whether workers may be forked from it (ready, and CUDA not initialised).
        stderr_tail: what it wrote last to stderr (for the error of a failed start).
    """

    def __init__(self, plugins: list[str], preload: list[str], start_timeout: float) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        paths = [os.path.abspath(p) if p else os.getcwd() for p in sys.path]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(dict.fromkeys(paths)))
        imports = json.dumps({"plugins": plugins, "preload": preload})
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "agentfly.rollout.execution.forkserver_main",
                str(os.getpid()),
                imports,
                str(theirs.fileno()),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
            pass_fds=(theirs.fileno(),),
        )
        theirs.close()
        ours.setblocking(False)
        nonblocking(self.proc.stderr.fileno())  # type: ignore[union-attr]
        self.sock = ours
        self.start_deadline = time.monotonic() + start_timeout
        self.state = "starting"
        self.was_ready = False
        self.cuda = False
        self.failure = ""
        self.stderr_tail: collections.deque[bytes] = collections.deque()
        self._exits: dict[int, int] = {}

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def forks(self) -> bool:
        return self.state == "ready" and not self.cuda

    def fds(self) -> list[int]:
        """What the pool's ``select`` watches: the socket and the server's stderr."""
        if self.state == "gone":
            return []
        return [self.sock.fileno(), self.proc.stderr.fileno()]  # type: ignore[union-attr]

    def read(self) -> None:
        """Take in what the server sent (its start, exit reports) without waiting."""
        while self._receive(0.0) is not None:
            pass

    def read_stderr(self) -> None:
        try:
            data = os.read(self.proc.stderr.fileno(), 65536)  # type: ignore[union-attr]
        except (BlockingIOError, OSError, ValueError):
            return
        if data:
            self.stderr_tail.append(data)
            while sum(map(len, self.stderr_tail)) > STDERR_TAIL_BYTES and len(self.stderr_tail) > 1:
                self.stderr_tail.popleft()
            if self.state != "starting":
                sys.stderr.write(data.decode("utf-8", "replace"))

    def _receive(self, timeout: float) -> tuple | None:
        """One message (None when none came within ``timeout``); a closed socket: ``gone``."""
        if self.state in ("gone", "failed"):
            return None
        try:
            if timeout > 0 and not select.select([self.sock], [], [], timeout)[0]:
                return None
            data = self.sock.recv(MESSAGE_BYTES)
        except BlockingIOError:
            return None
        except (OSError, ValueError):  # closed meanwhile
            data = b""
        if not data:
            self.state = "failed" if self.state == "failed" else "gone"  # what failed stays said
            return None
        message = pickle.loads(data)
        if message[0] == "ready":
            self.state, self.cuda, self.was_ready = "ready", bool(message[2]), True
        elif message[0] == "failed":
            self.state, self.failure = "failed", str(message[1])
        elif message[0] == "exit":
            self._exits[int(message[1])] = int(message[2])
            while len(self._exits) > MAX_EXITS_KEPT:  # of workers discarded without a wait
                del self._exits[next(iter(self._exits))]
        return message

    def fork(self, memory_mb: int, max_reply_bytes: int) -> ForkedProcess:
        """A new worker (started: it says ``ready`` on its stdout when it is).

        Raises:
            ForkServerLost: the server is gone or did not answer within :data:`FORK_REPLY_S`.
        """
        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        stderr_r, stderr_w = os.pipe()
        ours = (stdin_w, stdout_r, stderr_r)
        try:
            socket.send_fds(
                self.sock,
                [pickle.dumps(("fork", memory_mb, max_reply_bytes))],
                [stdin_r, stdout_w, stderr_w],
            )
        except OSError as e:
            for fd in ours:
                os.close(fd)
            self.state = "gone"
            raise ForkServerLost(f"the fork server is gone ({e})") from e
        finally:
            for fd in (stdin_r, stdout_w, stderr_w):
                os.close(fd)
        deadline = time.monotonic() + FORK_REPLY_S
        while (left := deadline - time.monotonic()) > 0 and self.state != "gone":
            message = self._receive(left)
            if message is not None and message[0] == "forked":
                for fd in ours:
                    nonblocking(fd)
                return ForkedProcess(int(message[1]), *ours, server=self)
        for fd in ours:
            os.close(fd)
        self.state = "gone"
        raise ForkServerLost(f"the fork server did not fork a worker within {FORK_REPLY_S:g} s")

    def exit_code(self, pid: int, timeout: float) -> int | None:
        """The exit code of forked worker ``pid``, waiting for the report ``timeout`` s at most."""
        deadline = time.monotonic() + timeout
        while pid not in self._exits:
            left = deadline - time.monotonic()
            if left <= 0 or self.state == "gone":
                self.read()
                break
            self._receive(left)
        return self._exits.pop(pid, None)

    def close(self) -> None:
        """Kill the server (its workers kill themselves when it is gone) and reap it."""
        kill_group(self.proc.pid)
        for stream in (self.sock, self.proc.stderr):
            with contextlib.suppress(OSError):
                stream.close()  # type: ignore[union-attr]
        self.state = "gone"
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=1.0)
