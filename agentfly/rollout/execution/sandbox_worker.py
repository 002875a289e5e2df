"""The child side of the sandbox: limits itself, then runs code. Never imported by the parent.

``sandbox.py`` runs this file's source with ``python -I -c <source> MODE LIMITS_JSON [N]``, inside
bubblewrap unless the caller opted out, so it must only use the standard library.

Before any user code: a root worker (bubblewrap as root, see ``sandbox_isolation.py``) drops to
``limits["uid"]`` with no groups, which also drops its capabilities; then the resource limits
are set, ``RLIMIT_NPROC`` (``max_processes``) last, counted against the new uid.

Modes:
    oneshot N: read exactly N bytes of code from stdin, run them as ``__main__``; the rest of
        stdin is the program's own input; output goes straight to stdout/stderr.
    repl: a persistent interpreter. Each request is one JSON line ``{"code": ...}`` on stdin;
        each reply one JSON line ``{"stdout", "stderr", "error", "truncated"}`` on stdout. Cells
        share one globals dict; a trailing expression's repr is printed, as in a notebook.
"""

import ast
import io
import json
import linecache
import os
import resource
import signal
import sys
import traceback
import types

MB = 1024 * 1024


def drop_privileges(uid: int) -> None:
    """Become ``uid`` (gid the same, no supplementary groups), for good."""
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    if os.getuid() == 0 or os.geteuid() == 0:
        raise SystemExit("sandbox_worker: could not drop root privileges")


def set_limits(limits: dict) -> None:
    if limits.get("uid") is not None and os.geteuid() == 0:
        drop_privileges(int(limits["uid"]))
    memory = limits["memory_mb"] * MB
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    files = limits["max_open_files"]
    resource.setrlimit(resource.RLIMIT_NOFILE, (files, files))
    size = limits["max_file_mb"] * MB
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    if limits.get("cpu_seconds"):  # oneshot: a hard budget for the whole run
        cpu = int(limits["cpu_seconds"])
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    if limits.get("max_processes"):  # tasks of this uid (threads count), this one included
        nproc = int(limits["max_processes"])
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    # A write past RLIMIT_FSIZE raises OSError instead of killing the process.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def fresh_main() -> dict:
    module = types.ModuleType("__main__")
    sys.modules["__main__"] = module
    return module.__dict__


def remember_source(filename: str, source: str) -> None:
    """Let tracebacks show the lines of code that was never a file."""
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)


def print_user_traceback(exc: BaseException) -> None:
    """Print a traceback without this driver's own frame."""
    tb = exc.__traceback__.tb_next if exc.__traceback__ else None
    traceback.print_exception(type(exc), exc, tb)


def read_exactly(fd: int, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = os.read(fd, left)
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def run_oneshot(n_bytes: int) -> None:
    source = read_exactly(0, n_bytes).decode("utf-8")
    remember_source("main.py", source)
    scope = fresh_main()
    try:
        exec(compile(source, "main.py", "exec"), scope)
    except SystemExit:
        raise
    except BaseException as exc:
        print_user_traceback(exc)
        sys.stderr.flush()
        sys.exit(1)


class CappedWriter(io.TextIOBase):
    """A text stream that keeps at most ``cap`` characters and counts the rest."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.parts: list[str] = []
        self.size = 0
        self.dropped = 0

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        room = self.cap - self.size
        if room > 0:
            self.parts.append(text[:room])
            self.size += min(room, len(text))
        self.dropped += max(0, len(text) - max(room, 0))
        return len(text)

    def getvalue(self) -> str:
        return "".join(self.parts)


def run_cell(source: str, scope: dict, cap: int, cpu_seconds: float, count: int) -> dict:
    filename = f"<cell {count}>"
    remember_source(filename, source)
    out, err = CappedWriter(cap), CappedWriter(cap)
    sys.stdout, sys.stderr = out, err
    used = resource.getrusage(resource.RUSAGE_SELF)
    soft = int(used.ru_utime + used.ru_stime + cpu_seconds) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (soft, resource.RLIM_INFINITY))
    error = None
    try:
        tree = ast.parse(source, filename, "exec")
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        exec(compile(tree, filename, "exec"), scope)
        if last is not None:
            value = eval(compile(ast.Expression(last.value), filename, "eval"), scope)
            if value is not None:
                print(repr(value))
    except BaseException as exc:  # SystemExit and KeyboardInterrupt end the cell, not the worker
        error = type(exc).__name__
        if isinstance(exc, SyntaxError):
            traceback.print_exception(type(exc), exc, None)
        else:
            print_user_traceback(exc)
    finally:
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
    return {
        "stdout": out.getvalue(),
        "stderr": err.getvalue(),
        "error": error,
        "truncated": bool(out.dropped or err.dropped),
    }


def run_repl(limits: dict) -> None:
    # The protocol gets private copies of stdin/stdout; the cells get an empty stdin and their
    # fd-level writes (C extensions, os.write) go to /dev/null instead of corrupting replies.
    requests = os.fdopen(os.dup(0), "rb")
    replies = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    sys.stdin = io.StringIO("")
    scope = fresh_main()
    replies.write(b'{"ready": true}\n')
    replies.flush()
    for count, line in enumerate(requests, start=1):
        request = json.loads(line)
        reply = run_cell(
            request["code"], scope, limits["max_output_chars"], limits["cell_cpu_seconds"], count
        )
        replies.write(json.dumps(reply).encode("utf-8") + b"\n")
        replies.flush()


def main() -> None:
    mode, limits = sys.argv[1], json.loads(sys.argv[2])
    set_limits(limits)
    if mode == "oneshot":
        run_oneshot(int(sys.argv[3]))
    else:
        run_repl(limits)


if __name__ == "__main__":
    main()
