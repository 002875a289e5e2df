"""One worker process as the pool sees it, and the plain operations on it: its pipes made
non-blocking, drained, the process group killed and reaped, its exit described."""

from __future__ import annotations

import collections
import contextlib
import fcntl
import json
import logging
import os
import pickle
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from agentfly.rollout.execution.call_queue import Call
from agentfly.rollout.execution.worker_main import HEADER, RemoteError, ReplyTooLarge

logger = logging.getLogger("agentfly.rollout.execution.workers")

STDERR_TAIL_BYTES = 4096  # what a worker wrote last, kept for the error of a failed start
STDERR_FORWARD_BYTES = 64 * 1024  # a worker's stderr passed on per call at most


@dataclass
class Worker:
    """A worker process: started from scratch (``proc`` a ``Popen``), or forked by the fork
    server (a :class:`~agentfly.rollout.execution.forkserver.ForkedProcess`)."""

    proc: Any
    start_deadline: float
    state: str = "starting"  # starting | idle | busy
    job: Call | None = None
    inbox: bytearray = field(default_factory=bytearray)
    outbox: memoryview | None = None
    stderr_tail: collections.deque[bytes] = field(default_factory=collections.deque)
    forwarded: int = 0
    #: (when, CPU seconds of its process tree then): the last look of :mod:`.lending`
    mark: tuple[float, float] | None = None
    #: resident MiB of its process tree when last looked at (counted while its call is lent)
    rss_mb: float = 0.0

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def forked(self) -> bool:
        return not isinstance(self.proc, subprocess.Popen)


def nonblocking(fd: int) -> None:
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)


def drain(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except (BlockingIOError, OSError):
        pass


def kill_group(pid: int) -> None:
    """SIGKILL the process group ``pid`` leads, and ``pid`` itself."""
    for signal_to in (os.killpg, os.kill):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            signal_to(pid, signal.SIGKILL)


def kill(w: Worker) -> None:
    kill_group(w.pid)
    for stream in (w.proc.stdin, w.proc.stdout, w.proc.stderr):
        with contextlib.suppress(OSError):
            stream.close()  # type: ignore[union-attr]


def reap(w: Worker, timeout: float) -> None:
    try:
        w.proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        logger.warning("worker %d did not exit within %.1f s of SIGKILL", w.pid, timeout)


def exit_description(code: int) -> str:
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def how_it_ended(w: Worker) -> str:
    """How a worker whose reply pipe closed ended (waiting up to 0.2 s for its exit status)."""
    try:
        return exit_description(w.proc.wait(timeout=0.2))
    except subprocess.TimeoutExpired:
        return "it closed its reply pipe"


def spawn(
    memory_mb: int, max_reply_bytes: int, plugins: list[str], preload: list[str],
    start_timeout: float,
) -> Worker:
    """Start a worker process (:mod:`agentfly.rollout.execution.worker_main`) in a process group
    of its own, with this process's import path and its pipes non-blocking."""
    paths = [os.path.abspath(p) if p else os.getcwd() for p in sys.path]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(dict.fromkeys(paths)))
    cmd = [
        sys.executable, "-m", "agentfly.rollout.execution.worker_main", str(os.getpid()),
        str(memory_mb), str(max_reply_bytes), json.dumps({"plugins": plugins, "preload": preload}),
    ]
    proc = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env=env, start_new_session=True, close_fds=True,
    )
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        nonblocking(stream.fileno())  # type: ignore[union-attr]
    return Worker(proc, time.monotonic() + start_timeout)


def read_stderr(w: Worker) -> bool:
    """Read what ``w`` wrote to stderr (kept as its tail, passed on); whether there was any."""
    try:
        data = os.read(w.proc.stderr.fileno(), 65536)  # type: ignore[union-attr]
    except (BlockingIOError, OSError, ValueError):
        return False
    if not data:
        return False
    w.stderr_tail.append(data)
    while sum(map(len, w.stderr_tail)) > STDERR_TAIL_BYTES and len(w.stderr_tail) > 1:
        w.stderr_tail.popleft()
    if w.state == "starting":
        return True
    room = STDERR_FORWARD_BYTES - w.forwarded
    w.forwarded += len(data)
    if room > 0:
        text = data[:room].decode("utf-8", "replace")
        if len(data) > room:
            text += f"\n[worker {w.pid}: further stderr of this call is not shown]\n"
        with contextlib.suppress(Exception):
            sys.stderr.write(text)
    return True


def read_last_stderr(w: Worker) -> None:
    """What a worker that failed to start wrote last, waiting up to 0.1 s for it."""
    for _ in range(20):
        if not read_stderr(w):
            time.sleep(0.005)


def send_request(w: Worker) -> None:
    """Write what the pipe takes of ``w``'s pending request."""
    try:
        sent = os.write(w.proc.stdin.fileno(), w.outbox)
        w.outbox = w.outbox[sent:] if sent < len(w.outbox) else None
    except BlockingIOError:
        pass
    except OSError:  # the worker is gone; its stdout says so next
        w.outbox = None


def read_replies(w: Worker, max_reply_bytes: int) -> list[bytes] | None:
    """The whole reply frames ``w`` has sent (none yet: []); None at end of file (it died).

    Raises:
        ReplyTooLarge: a frame announces more than the cap (the worker enforces it; a frame
            past it is never read).
    """
    try:
        data = os.read(w.proc.stdout.fileno(), 1 << 20)
    except BlockingIOError:
        return []
    except OSError:
        data = b""
    if not data:
        return None
    w.inbox += data
    frames = []
    while len(w.inbox) >= HEADER.size:
        (size,) = HEADER.unpack_from(w.inbox)
        if size > max_reply_bytes + 4096:
            raise ReplyTooLarge(size, max_reply_bytes)
        if len(w.inbox) < HEADER.size + size:
            break
        frames.append(bytes(w.inbox[HEADER.size : HEADER.size + size]))
        del w.inbox[: HEADER.size + size]
    return frames


def decode_reply(frame: bytes) -> tuple:
    """A worker's reply frame: ``("ready",)``, ``("ok", value)`` or ``("error", exception bytes,
    type name, message)``; one that cannot be unpickled here is an error reply saying so."""
    try:
        return pickle.loads(frame)
    except BaseException as exc:
        return ("error", b"", type(exc).__name__, f"its reply cannot be read here: {exc}")


def reply_error(reply: tuple) -> BaseException:
    """The exception of an error reply: the worker's own, or a :class:`RemoteError` with its type
    name and message when it cannot be rebuilt here."""
    _, exc_bytes, type_name, message = reply
    try:
        error = pickle.loads(exc_bytes)
    except BaseException:
        return RemoteError(type_name, message)
    return error if isinstance(error, BaseException) else RemoteError(type_name, message)
