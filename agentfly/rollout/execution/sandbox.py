"""Running untrusted Python: ``run_code`` (one program) and ``PythonSession`` (a persistent REPL).

Code runs in a separate process (``sandbox_worker.py``) that sets its own limits before running
anything: address space (``RLIMIT_AS``), CPU time (``RLIMIT_CPU``), open files
(``RLIMIT_NOFILE``), file size (``RLIMIT_FSIZE``) and processes (``RLIMIT_NPROC``,
``max_processes``). The parent adds a wall-clock limit, caps the output it keeps, and kills the
child's whole process group when a call ends (however it ends) and when a session closes. The
child never gets the parent's environment variables.

Containment (``isolation``, see ``sandbox_isolation.py``): ``"bwrap"``, the default, runs the
child under bubblewrap (read-only root, private ``/tmp``, no network, its own PIDs, an
unprivileged uid; every process of the sandbox, detached ones included, dies with the call) and
raises ``SandboxUnavailableError`` where bubblewrap cannot run; ``"unsafe_rlimits_only"`` is the
explicit opt-in to run with the limits and a fresh temporary directory only, and warns once
naming everything that is then not contained.

``run_code(workdir=...)`` runs the program in a caller's directory that it may write (the SWE
tools' per-chain workspace): under bwrap it is bound at ``WORKDIR_MOUNT``; a root trainer's
sandbox runs as a uid of its own, so the directory's tree is first opened to every user
(:func:`open_to_sandbox`): the caller keeps it inside a private (0700) directory and runs one
program in it at a time.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import selectors
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import IO

from agentfly.rollout.execution.sandbox_isolation import (
    ISOLATIONS,
    OPT_IN_KEY,
    SANDBOX_ENV,
    WORKDIR_MOUNT,
    Isolation,
    SandboxUnavailableError,
    bwrap_problem,
    is_root,
    isolation_problem,
    sandbox_uid,
    use_bwrap,
    user_tasks,
    worker_command,
)

__all__ = [
    "ISOLATIONS",
    "OPT_IN_KEY",
    "WORKDIR_MOUNT",
    "CellResult",
    "Isolation",
    "PythonSession",
    "SandboxResult",
    "SandboxUnavailableError",
    "bwrap_problem",
    "isolation_problem",
    "run_code",
]

#: processes (threads included) one sandbox may run at once, its interpreter included
MAX_PROCESSES = 64


@dataclass
class SandboxResult:
    """The outcome of ``run_code``.

    Attributes:
        stdout: what the program printed (cut to ``max_output_chars``).
        stderr: its error output, tracebacks included (cut likewise).
        returncode: the exit status; negative for a signal (``-9`` after a timeout).
        timed_out: the wall-clock limit killed it.
        truncated: some output was cut.
    """

    stdout: str
    stderr: str
    returncode: int
    timed_out: bool = False
    truncated: bool = False


@dataclass
class CellResult:
    """The outcome of one ``PythonSession.run``.

    Attributes:
        stdout: printed output, then the repr of a trailing expression.
        stderr: error output and the traceback, if any.
        error: the exception's class name when the cell raised, else ``None``.
        timed_out: the cell hit its wall-clock limit and the worker was restarted.
        restarted: the worker was restarted during this call (variables are lost).
        truncated: some output was cut.
    """

    stdout: str = ""
    stderr: str = ""
    error: str | None = None
    timed_out: bool = False
    restarted: bool = False
    truncated: bool = False


def open_to_sandbox(top: str) -> None:
    """Make every directory (0777) and regular file (a+rw) under ``top`` writable by any uid,
    through directory descriptors and ``O_NOFOLLOW``, so a symbolic link the sandbox left there
    never sends the change outside ``top``."""
    for _, _, files, dir_fd in os.fwalk(top, follow_symlinks=False):
        os.fchmod(dir_fd, 0o777)
        for name in files:
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
            except OSError:  # a symbolic link, a socket
                continue
            try:
                mode = os.fstat(fd).st_mode
                if stat.S_ISREG(mode):
                    os.fchmod(fd, stat.S_IMODE(mode) | 0o666)
            finally:
                os.close(fd)


def _start(
    mode: str,
    limits: dict,
    *extra: str,
    bwrap: bool,
    max_processes: int,
    workdir: str | None = None,
) -> tuple[subprocess.Popen, str | None]:
    """Start the worker, in ``workdir`` if given, else in a fresh temporary directory without
    bwrap (without bwrap a fresh one is its ``HOME`` and ``TMPDIR`` either way).

    Returns:
        The process and the temporary directory (``None`` under bwrap), to remove afterwards.
    """
    limits = dict(limits)
    scratch = None
    env = dict(SANDBOX_ENV)
    if bwrap:
        limits["max_processes"] = max_processes
        if is_root():
            limits["uid"] = sandbox_uid()
            if workdir is not None:
                open_to_sandbox(workdir)
    else:
        scratch = tempfile.mkdtemp(prefix="agentfly-sandbox-")
        env.update(HOME=scratch, TMPDIR=scratch)
        if not is_root():  # the kernel never applies RLIMIT_NPROC to root
            limits["max_processes"] = user_tasks(os.getuid()) + max_processes
    try:
        proc = subprocess.Popen(
            worker_command(mode, limits, *extra, bwrap=bwrap, workdir=workdir),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=scratch if workdir is None or bwrap else workdir,
            start_new_session=True,
        )
    except BaseException:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
        raise
    return proc, scratch


def _kill(proc: subprocess.Popen) -> None:
    """Kill the child's whole process group (bwrap, the interpreter, anything it spawned that
    did not leave the group) and reap the child. Under bwrap the PID namespace ends with it,
    taking every process of the sandbox along."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _limits(memory_mb: int, max_output_chars: int, **extra: float) -> dict:
    return {
        "memory_mb": memory_mb,
        "max_open_files": 64,
        "max_file_mb": 64,
        "max_output_chars": max_output_chars,
        **extra,
    }


def _feed(pipe: IO[bytes], data: bytes) -> None:
    """Write the child's stdin and close it; a child that exits early just stops the writing."""
    with contextlib.suppress(OSError):
        pipe.write(data)
    with contextlib.suppress(OSError):
        pipe.close()


def _communicate(
    proc: subprocess.Popen, data: bytes, timeout: float, cap: int
) -> tuple[bytes, bytes, bool, bool]:
    """Feed stdin, collect at most ``cap`` bytes of each output until exit or ``timeout``.

    Returns:
        (stdout, stderr, timed_out, truncated).
    """
    writer = threading.Thread(target=_feed, args=(proc.stdin, data), daemon=True)
    writer.start()
    buffers = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    truncated = timed_out = False
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        for fd in buffers:
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            for key, _ in selector.select(left):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    selector.unregister(key.fd)
                    continue
                buffer = buffers[key.fd]
                room = cap - len(buffer)
                buffer += chunk[: max(room, 0)]
                truncated |= len(chunk) > room
    if not timed_out:
        try:
            proc.wait(max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            timed_out = True
    _kill(proc)  # whatever is left of the group, after an exit as after a timeout
    writer.join(1)
    return (
        bytes(buffers[proc.stdout.fileno()]),
        bytes(buffers[proc.stderr.fileno()]),
        timed_out,
        truncated,
    )


def _decode(data: bytes, max_chars: int) -> tuple[str, bool]:
    text = data.decode("utf-8", errors="replace")
    return text[:max_chars], len(text) > max_chars


def run_code(
    code: str,
    *,
    timeout: float = 10.0,
    memory_mb: int = 1024,
    stdin: str | None = None,
    max_output_chars: int = 10000,
    isolation: Isolation = "bwrap",
    cpu_seconds: float | None = None,
    max_processes: int = MAX_PROCESSES,
    workdir: str | None = None,
) -> SandboxResult:
    """Run a Python program in a fresh sandboxed process.

    Args:
        code: the program, run as ``__main__``.
        timeout: wall-clock seconds before the process group is killed.
        memory_mb: address-space limit of each process.
        stdin: the program's standard input.
        max_output_chars: stdout and stderr are each cut to this many characters.
        isolation: ``"bwrap"`` or ``"unsafe_rlimits_only"`` (see the module docstring).
        cpu_seconds: CPU-time limit of each process (``SIGXCPU`` past it); ``None`` = the
            timeout rounded up, plus one.
        max_processes: processes and threads the program may run at once, itself included.
        workdir: a directory the program runs in and may write (see the module docstring);
            ``None``: a fresh empty one.

    Returns:
        The ``SandboxResult``; a program that fails is reported, not raised.

    Raises:
        SandboxUnavailableError: ``isolation="bwrap"`` where bubblewrap cannot run.
        ValueError: an unknown ``isolation``.
    """
    bwrap = use_bwrap(isolation)
    source = code.encode("utf-8")
    cpu = math.ceil(timeout) + 1 if cpu_seconds is None else math.ceil(cpu_seconds)
    limits = _limits(memory_mb, max_output_chars, cpu_seconds=cpu)
    proc, scratch = _start(
        "oneshot", limits, str(len(source)), bwrap=bwrap, max_processes=max_processes,
        workdir=workdir,
    )
    try:
        with proc:
            cap = 4 * max_output_chars + 4
            data = source + (stdin or "").encode("utf-8")
            out, err, timed_out, cut = _communicate(proc, data, timeout, cap)
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    stdout, cut_out = _decode(out, max_output_chars)
    stderr, cut_err = _decode(err, max_output_chars)
    return SandboxResult(
        stdout=stdout,
        stderr=stderr,
        returncode=proc.returncode,
        timed_out=timed_out,
        truncated=cut or cut_out or cut_err,
    )


class PythonSession:
    """A persistent sandboxed Python interpreter: variables survive from one cell to the next.

    A cell that runs past ``timeout`` gets the worker killed and restarted (its variables are
    lost; the result says so), as does a worker that dies (e.g. out of memory). Calls are
    serialised; ``close`` kills the worker. Use one session per chain.

    Args:
        timeout: wall-clock seconds per cell (CPU time per cell is capped likewise).
        memory_mb: address-space limit of the worker.
        max_output_chars: stdout and stderr of a cell are each cut to this many characters.
        isolation: ``"bwrap"`` or ``"unsafe_rlimits_only"``, as for ``run_code``.
        start_timeout: seconds to wait for a new worker to come up.
        max_processes: processes and threads the worker may run at once, itself included.

    Raises:
        SandboxUnavailableError: ``isolation="bwrap"`` where bubblewrap cannot run.
        ValueError: an unknown ``isolation``.
    """

    def __init__(
        self,
        *,
        timeout: float = 10.0,
        memory_mb: int = 1024,
        max_output_chars: int = 10_000,
        isolation: Isolation = "bwrap",
        start_timeout: float = 30.0,
        max_processes: int = MAX_PROCESSES,
    ) -> None:
        self.timeout = timeout
        self.memory_mb = memory_mb
        self.max_output_chars = max_output_chars
        self.start_timeout = start_timeout
        self.max_processes = max_processes
        self._bwrap = use_bwrap(isolation)
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._workdir: str | None = None
        self._pending = b""
        self._closed = False
        with self._lock:
            self._start()

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def _start(self) -> None:
        limits = _limits(
            self.memory_mb, self.max_output_chars, cell_cpu_seconds=math.ceil(self.timeout)
        )
        self._proc, self._workdir = _start(
            "repl", limits, bwrap=self._bwrap, max_processes=self.max_processes
        )
        self._pending = b""
        if self._read_line(self.start_timeout) is None:
            stderr = b""
            if self._proc.poll() is not None:
                stderr = self._proc.stderr.read()
            self._stop()
            raise RuntimeError(
                f"the Python sandbox worker did not start: {stderr.decode(errors='replace')[-2000:]}"
            )

    def _stop(self) -> None:
        if self._proc is not None:
            _kill(self._proc)
            for pipe in (self._proc.stdin, self._proc.stdout, self._proc.stderr):
                pipe.close()
            self._proc = None
        if self._workdir:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    def _read_line(self, timeout: float) -> bytes | None:
        """One reply line, or ``None`` on timeout or when the worker exits."""
        fd = self._proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._pending:
                left = deadline - time.monotonic()
                if left <= 0 or not selector.select(left):
                    return None
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    return None
                self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        return line

    def run(self, code: str, *, timeout: float | None = None) -> CellResult:
        """Run one cell in the session.

        Args:
            code: Python statements; a trailing expression's repr is printed.
            timeout: wall-clock limit for this cell (default: the session's).
        """
        timeout = self.timeout if timeout is None else timeout
        with self._lock:
            if self._closed:
                raise RuntimeError("the Python session is closed")
            restarted = not self.alive
            if restarted:
                self._stop()
                self._start()
            try:
                self._proc.stdin.write(json.dumps({"code": code}).encode("utf-8") + b"\n")
                self._proc.stdin.flush()
                line = self._read_line(timeout)
            except (BrokenPipeError, OSError):
                line = None
            if line is None:
                timed_out = self._proc.poll() is None
                self._stop()
                self._start()
                why = (
                    f"the cell ran past {timeout:g} seconds and was stopped"
                    if timed_out
                    else "the Python process died (out of memory or CPU time?)"
                )
                return CellResult(
                    stderr=f"{why}; the interpreter was restarted and all variables are lost.",
                    error="Timeout" if timed_out else "WorkerDied",
                    timed_out=timed_out,
                    restarted=True,
                )
        reply = json.loads(line)
        return CellResult(
            stdout=reply["stdout"],
            stderr=reply["stderr"],
            error=reply["error"],
            restarted=restarted,
            truncated=reply["truncated"],
        )

    def restart(self) -> None:
        """Kill the worker and start a fresh one (all variables are lost)."""
        with self._lock:
            self._stop()
            self._start()

    def close(self) -> None:
        """Kill the worker; the session cannot be used afterwards. Safe to call twice."""
        with self._lock:
            self._closed = True
            self._stop()

    def __enter__(self) -> PythonSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        proc = getattr(self, "_proc", None)
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
