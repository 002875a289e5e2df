"""Running untrusted Python: ``run_code`` (one program) and ``PythonSession`` (a persistent REPL).

Code runs in a separate process (``sandbox_worker.py``) that sets its own limits before running
anything: address space (``RLIMIT_AS``), CPU time (``RLIMIT_CPU``), open files
(``RLIMIT_NOFILE``) and file size (``RLIMIT_FSIZE``). The parent adds a wall-clock limit (the
whole process group is killed) and caps the output it keeps. The child gets a minimal
environment, never the parent's variables.

Isolation: when ``bwrap`` (bubblewrap) is on PATH the child runs in new namespaces (no network,
its own PIDs, no capabilities, uid 65534) over a read-only view of ``/`` where ``/tmp``,
``/work``, ``/root``, ``/home``, ``/run`` and the repository are replaced by empty tmpfs (the
Python installation is mounted back read-only). Without a working ``bwrap`` (absent, or unable to
create namespaces in this container; probed once) it falls back to the limits and a fresh
temporary working directory; the child can then read whatever the user running the trainer can
read, and a warning says so once.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import IO, Literal

logger = logging.getLogger(__name__)

Isolation = Literal["auto", "bwrap", "rlimits"]

_WORKER = Path(__file__).with_name("sandbox_worker.py")
_HIDDEN = ("/tmp", "/work", "/root", "/home", "/run", "/mnt", "/srv")
_SYSTEM = {"/", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc", "/proc", "/dev", "/sys", "/opt"}
_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/tmp",
    "LANG": "C.UTF-8",
    "PYTHONIOENCODING": "utf-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}


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


@cache
def _bwrap() -> str | None:
    return shutil.which("bwrap")


@cache
def _warn_no_bwrap(problem: str) -> None:
    logger.warning(
        "%s: sandboxed code runs with resource limits and a fresh working directory only, and "
        "can read any file this user can. Install bubblewrap (and allow user namespaces) to "
        "hide the file system and the network from it.",
        problem,
    )


@cache
def bwrap_problem() -> str | None:
    """Why bubblewrap cannot sandbox code here, or ``None`` when it can (probed once)."""
    if _bwrap() is None:
        return "bwrap (bubblewrap) is not on PATH"
    try:
        probe = subprocess.run(
            [*_bwrap_prefix(), sys.executable, "-I", "-c", "pass"],
            capture_output=True,
            env=dict(_ENV),
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bwrap failed to start ({e})"
    if probe.returncode != 0:
        return f"bwrap cannot make a sandbox here ({probe.stderr.decode(errors='replace').strip()})"
    return None


def use_bwrap(isolation: Isolation = "auto") -> bool:
    """Whether code will run inside bubblewrap under ``isolation``.

    Raises:
        RuntimeError: ``isolation="bwrap"`` where bubblewrap cannot run.
    """
    if isolation == "rlimits":
        return False
    problem = bwrap_problem()
    if problem is None:
        return True
    if isolation == "bwrap":
        raise RuntimeError(f"isolation='bwrap' but {problem}")
    _warn_no_bwrap(problem)
    return False


def _is_under(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


@cache
def _bwrap_prefix() -> tuple[str, ...]:
    repo = str(Path(__file__).resolve().parents[2])
    hidden = [p for p in (*_HIDDEN, repo, os.getcwd()) if p not in _SYSTEM and os.path.isdir(p)]
    hidden = [
        p for p in dict.fromkeys(hidden) if not any(_is_under(p, h) for h in _HIDDEN if h != p)
    ]
    interpreter = {sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    rebind = [p for p in interpreter if any(_is_under(p, h) for h in hidden)]
    rebind = sorted(p for p in rebind if not any(_is_under(p, q) and p != q for q in rebind))
    args = [_bwrap() or "bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    for path in hidden:
        args += ["--tmpfs", path]
    for path in rebind:
        args += ["--ro-bind", path, path]
    args += ["--unshare-all", "--die-with-parent", "--cap-drop", "ALL"]
    args += ["--uid", "65534", "--gid", "65534", "--chdir", "/tmp", "--"]
    return tuple(args)


@cache
def _worker_source() -> str:
    return _WORKER.read_text(encoding="utf-8")


def _command(mode: str, limits: dict, *extra: str, bwrap: bool) -> list[str]:
    python = [sys.executable, "-I", "-c", _worker_source(), mode, json.dumps(limits), *extra]
    return [*_bwrap_prefix(), *python] if bwrap else python


def _kill(proc: subprocess.Popen) -> None:
    """Kill the child's whole process group (bwrap, the interpreter, anything it spawned)."""
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
    if timed_out:
        _kill(proc)
    else:
        try:
            proc.wait(max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill(proc)
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
    isolation: Isolation = "auto",
) -> SandboxResult:
    """Run a Python program in a fresh sandboxed process.

    Args:
        code: the program, run as ``__main__``.
        timeout: wall-clock seconds before the process group is killed (CPU time is capped at
            the same number of seconds, rounded up).
        memory_mb: address-space limit of the interpreter.
        stdin: the program's standard input.
        max_output_chars: stdout and stderr are each cut to this many characters.
        isolation: ``"auto"`` (bwrap when on PATH), ``"bwrap"`` (required) or ``"rlimits"``.

    Returns:
        The ``SandboxResult``; a program that fails is reported, not raised.
    """
    bwrap = use_bwrap(isolation)
    source = code.encode("utf-8")
    limits = _limits(memory_mb, max_output_chars, cpu_seconds=math.ceil(timeout) + 1)
    workdir = None if bwrap else tempfile.mkdtemp(prefix="agentfly-sandbox-")
    try:
        proc = subprocess.Popen(
            _command("oneshot", limits, str(len(source)), bwrap=bwrap),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(_ENV),
            cwd=workdir,
            start_new_session=True,
        )
        with proc:
            cap = 4 * max_output_chars + 4
            data = source + (stdin or "").encode("utf-8")
            out, err, timed_out, cut = _communicate(proc, data, timeout, cap)
    finally:
        if workdir:
            shutil.rmtree(workdir, ignore_errors=True)
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
        isolation: ``"auto"``, ``"bwrap"`` or ``"rlimits"``, as for ``run_code``.
        start_timeout: seconds to wait for a new worker to come up.
    """

    def __init__(
        self,
        *,
        timeout: float = 10.0,
        memory_mb: int = 1024,
        max_output_chars: int = 10_000,
        isolation: Isolation = "auto",
        start_timeout: float = 30.0,
    ) -> None:
        self.timeout = timeout
        self.memory_mb = memory_mb
        self.max_output_chars = max_output_chars
        self.start_timeout = start_timeout
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
        if not self._bwrap:
            self._workdir = tempfile.mkdtemp(prefix="agentfly-session-")
        self._proc = subprocess.Popen(
            _command("repl", limits, bwrap=self._bwrap),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(_ENV),
            cwd=self._workdir,
            start_new_session=True,
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
