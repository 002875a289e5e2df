"""The child side of :class:`agentfly.rollout.execution.forkserver.ForkServer`: a process that
imports the run's plugins and preloads once, then forks every worker of the pool from itself.

A worker started from scratch imports the plugins and the reward's preloads again (a second on
a math reward's sympy); a fork of this process is a worker in milliseconds, its imported pages
shared until written. So a replacement, a spare or a worker for a lent place
(:mod:`~agentfly.rollout.execution.lending`) costs the pool next to nothing.

Run as ``python -m agentfly.rollout.execution.forkserver_main PARENT_PID IMPORTS SOCKET_FD``.
Messages are pickled tuples on the Unix socket ``SOCKET_FD`` (``SOCK_SEQPACKET``: one tuple a
message):

- to the pool: ``("ready", pid, cuda)`` once the imports are done (``cuda``: they initialised
  CUDA, which a forked process cannot use: the pool forks nothing then, see
  :mod:`~agentfly.rollout.execution.forkserver`), or ``("failed", message)``;
  ``("forked", pid)`` for each fork; ``("exit", pid, returncode)`` for each worker reaped
  (``returncode`` as :class:`subprocess.Popen` gives it: negative for a signal).
- from the pool: ``("fork", memory_mb, max_reply_bytes)`` with three file descriptors: the
  worker's request pipe (its stdin), reply pipe (its stdout) and stderr.

A forked worker is a session of its own (its process group is what the pool kills) and runs
:func:`~agentfly.rollout.execution.worker_main.run_worker`, watching this process as its parent.
This process watches the pool's: when it is gone, or the socket closes, it kills every worker's
process group and exits. It starts no thread of its own (a fork copies only the forking thread).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import pickle
import select
import signal
import socket
import sys
import traceback

from agentfly.rollout.execution.worker_main import WATCH_INTERVAL_S, _import_plugins, run_worker

MESSAGE_BYTES = 65536
"""The largest message either side sends or reads (one ``SOCK_SEQPACKET`` packet: a longer one
would be cut at the reader's buffer and fail to unpickle)."""
FAILURE_CHARS = 8000  # of an import failure's report: its head and the traceback's end


def _send(sock: socket.socket, *message: object) -> None:
    sock.send(pickle.dumps(message))


def failure_report(text: str, limit: int = FAILURE_CHARS) -> str:
    """``text`` within ``limit`` characters: its start (the exception) and its end (where the
    traceback ends), what was left out said in between. Pickled, it stays under
    :data:`MESSAGE_BYTES` (at most 4 bytes a character in UTF-8)."""
    if len(text) <= limit:
        return text
    half = (limit - 40) // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters left out ...]\n{text[-half:]}"


def _reap(sock: socket.socket, children: set[int]) -> None:
    """Report every worker that has exited."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        children.discard(pid)
        _send(sock, "exit", pid, os.waitstatus_to_exitcode(status))


def _fork(
    sock: socket.socket,
    wake: tuple[int, int],
    fds: list[int],
    memory_mb: int,
    cap: int,
    loaded: set[str],
) -> int:
    pid = os.fork()
    if pid:
        for fd in fds:
            os.close(fd)
        return pid
    try:  # the worker
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        sock.close()
        for fd in wake:
            os.close(fd)
        os.setsid()
        for fd, target in zip(fds, (0, 1, 2), strict=True):
            os.dup2(fd, target)
            os.close(fd)
        code = run_worker(os.getppid(), memory_mb, cap, {"plugins": [], "preload": []}, loaded)
    except BaseException:
        traceback.print_exc()
        code = 1
    os._exit(code)


def _cuda_initialised() -> bool:
    torch = sys.modules.get("torch")
    try:
        return bool(torch is not None and torch.cuda.is_initialized())
    except Exception:
        return True  # cannot tell: do not fork


def serve(parent: int, imports: dict[str, list[str]], sock: socket.socket) -> int:
    loaded: set[str] = set()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(2, 1)  # what the plugins print at import goes to stderr
    os.close(null)
    wake = os.pipe()
    os.set_blocking(wake[1], False)
    signal.set_wakeup_fd(wake[1])
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the select below
    try:
        _import_plugins(imports["plugins"], loaded)
        for module in imports["preload"]:
            importlib.import_module(module)
    except BaseException as exc:
        _send(sock, "failed", failure_report(f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
        return 1
    _send(sock, "ready", os.getpid(), _cuda_initialised())
    children: set[int] = set()
    try:
        while os.getppid() == parent:
            readable, _, _ = select.select([sock, wake[0]], [], [], WATCH_INTERVAL_S)
            if wake[0] in readable:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake[0], 4096)
            _reap(sock, children)
            if sock in readable:
                message, fds, _, _ = socket.recv_fds(sock, 4096, 3)
                if not message:  # the pool closed its end
                    return 0
                _, memory_mb, cap = pickle.loads(message)
                pid = _fork(sock, wake, fds, memory_mb, cap, loaded)
                children.add(pid)
                _send(sock, "forked", pid)
        return 0
    except (BrokenPipeError, ConnectionResetError):  # the pool is gone
        return 0
    finally:
        for pid in children:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)


def main(argv: list[str]) -> int:
    parent, imports = int(argv[1]), json.loads(argv[2])
    sock = socket.socket(fileno=int(argv[3]))
    if os.getppid() != parent:
        return 1
    return serve(parent, imports, sock)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
