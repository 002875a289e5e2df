"""Runs an environment in a process of its own, where it can be killed, under per-call deadlines.

:class:`ProcessEnv` starts ``python -m agentfly.envs.process`` in a new session (its own process
group), sends it the environment's factory (cloudpickled) and then one call at a time over a pipe.
A call past its deadline kills the process group and every descendant (a Java or Stockfish
process included) and raises :class:`~agentfly.envs.base.EnvTimeout`; a process that dies during
a call raises :class:`~agentfly.envs.base.EnvCrashed` with its exit status and the tail of its
stderr; an exception in the environment's code raises the same typed error (an
:class:`~agentfly.envs.base.EnvError` subclass) or :class:`~agentfly.envs.base.EnvRaised`. After
any of these the process is gone and the next call raises
:class:`~agentfly.envs.base.EnvClosed`; only an :class:`~agentfly.envs.base.EnvUsageError` (the
caller's mistake) leaves it running.

Nothing outlives its owner: ``close()`` ends the environment and kills what is left of the
group; a ``ProcessEnv`` dropped without ``close()`` is killed when collected or at exit; and the
child kills its own group when the process that started it is gone (it watches its parent) or
the pipe closes.
"""

from __future__ import annotations

import contextlib
import functools
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection
from typing import Any

import cloudpickle
import psutil

from agentfly.envs import base
from agentfly.envs.base import (
    Env,
    EnvClosed,
    EnvCrashed,
    EnvError,
    EnvRaised,
    EnvTimeout,
    EnvUsageError,
    StepResult,
)

_STDERR_TAIL_BYTES = 2048
_PARENT_POLL_S = 0.5


def make_named_env(name: str, kwargs: Mapping[str, Any]) -> Env:
    """Factory of a registered environment (runs in the child)."""
    return base.get_env(name)(**dict(kwargs))


def kill_tree(pid: int, descendants: bool = True) -> None:
    """SIGKILL the process group led by ``pid`` and, with ``descendants``, every descendant of
    ``pid`` (also those that left the group). Vanished processes are skipped."""
    try:
        found = psutil.Process(pid).children(recursive=True) if descendants else []
    except psutil.Error:
        found = []
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    for proc in found:
        with contextlib.suppress(psutil.Error):
            proc.kill()


def _finalize(proc: subprocess.Popen[bytes]) -> None:
    # Also when it has exited: its group may still hold its orphaned children (a pid stays
    # unused while it names a process group). Its descendants only while it is not reaped.
    kill_tree(proc.pid, descendants=proc.poll() is None)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


class ProcessEnv:
    """An environment in its own killable process, with the :class:`~agentfly.envs.base.Env` calls.

    Args:
        factory: makes the environment in the child (picklable by cloudpickle: a class,
            ``functools.partial(cls, **kwargs)``...). :meth:`named` builds one from a registered name.
        start_timeout: seconds for the process to start and the factory to return.
        reset_timeout: seconds for one ``reset``.
        step_timeout: seconds for one ``step`` (and any other call).
        close_timeout: seconds for the environment's own ``close`` before the group is killed.
        label: the name used in messages (default: the factory's).
    """

    def __init__(
        self,
        factory: Callable[[], Env],
        *,
        start_timeout: float = 120.0,
        reset_timeout: float = 120.0,
        step_timeout: float = 60.0,
        close_timeout: float = 10.0,
        label: str | None = None,
    ) -> None:
        self.label = label or getattr(factory, "__name__", None) or type(factory).__name__
        self.reset_timeout = reset_timeout
        self.step_timeout = step_timeout
        self.close_timeout = close_timeout
        self._lock = threading.Lock()
        self._closed = False
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed by _kill)
        parent_read, child_write = os.pipe()
        child_read, parent_write = os.pipe()
        paths = [os.path.abspath(p) if p else os.getcwd() for p in sys.path]
        environ = dict(os.environ, PYTHONPATH=os.pathsep.join(dict.fromkeys(paths)))
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "agentfly.envs.process", str(child_read), str(child_write)],
                stdin=subprocess.DEVNULL, stdout=self._stderr, stderr=self._stderr,
                pass_fds=(child_read, child_write), env=environ, start_new_session=True,
            )
        finally:
            os.close(child_read)
            os.close(child_write)
        self._reader = Connection(parent_read, writable=False)
        self._writer = Connection(parent_write, readable=False)
        self._finalizer = weakref.finalize(self, _finalize, self._proc)
        self._call("__start__", (cloudpickle.dumps(factory),), {}, start_timeout)

    @classmethod
    def named(cls, name: str, env_kwargs: Mapping[str, Any] | None = None, **kwargs: Any) -> ProcessEnv:
        """A registered environment ``name`` made with ``env_kwargs`` in its own process."""
        factory = functools.partial(make_named_env, name, dict(env_kwargs or {}))
        return cls(factory, label=kwargs.pop("label", name), **kwargs)

    @property
    def pid(self) -> int:
        """The environment process's id (it leads its own process group)."""
        return self._proc.pid

    def reset(self, task: Mapping[str, Any] | None = None, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        return self._call("reset", (dict(task or {}), seed), {}, self.reset_timeout)

    def step(self, action: str) -> StepResult:
        return self._call("step", (action,), {}, self.step_timeout)

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call another public method of the environment (under ``step_timeout``)."""
        if method.startswith("_"):
            raise EnvUsageError(f"{self.label}: {method!r} is not a public method")
        return self._call(method, args, kwargs, self.step_timeout)

    @property
    def busy(self) -> bool:
        """Whether a call is in progress (another thread waits on the environment)."""
        return self._lock.locked()

    def kill(self) -> None:
        """Kill the process group now, without waiting for a call in progress (that call then
        raises :class:`~agentfly.envs.base.EnvCrashed`); :meth:`close` still releases the rest."""
        self._finalizer()

    def close(self) -> None:
        """Close the environment (its own ``close`` under ``close_timeout``), then kill what is
        left of its process group. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            with contextlib.suppress(EnvError, OSError):
                self._send_and_wait("close", (), {}, self.close_timeout)
            self._kill()

    def __enter__(self) -> ProcessEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ the parent's side

    def _call(self, method: str, args: tuple, kwargs: dict, timeout: float) -> Any:
        with self._lock:
            if self._closed:
                raise EnvClosed(f"{self.label}: {method}() on an environment that was closed")
            try:
                return self._send_and_wait(method, args, kwargs, timeout)
            except EnvUsageError:
                raise
            except BaseException:
                self._closed = True
                self._kill()
                raise

    def _send_and_wait(self, method: str, args: tuple, kwargs: dict, timeout: float) -> Any:
        try:
            self._writer.send_bytes(cloudpickle.dumps((method, args, kwargs)))
        except (BrokenPipeError, OSError):
            raise self._crashed(method) from None
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise EnvTimeout(
                    f"{self.label}: {method}() did not return within {timeout:g} s; "
                    f"its process (pid {self.pid}) and its children were killed"
                )
            if self._reader.poll(min(left, 0.5)):
                try:
                    status, payload = pickle.loads(self._reader.recv_bytes())
                except (EOFError, OSError):
                    raise self._crashed(method) from None
                break
            if self._proc.poll() is not None and not self._reader.poll(0):
                raise self._crashed(method)
        if status == "ok":
            return payload
        raise _rebuild_error(self.label, method, payload)

    def _crashed(self, method: str) -> EnvCrashed:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=2)
        code = self._proc.poll()
        how = "still running" if code is None else (
            f"killed by signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}")
        self._stderr.seek(0, os.SEEK_END)
        self._stderr.seek(max(0, self._stderr.tell() - _STDERR_TAIL_BYTES))
        tail = self._stderr.read().decode(errors="replace").strip()
        return EnvCrashed(f"{self.label}: its process died during {method}() ({how})"
                          + (f"; stderr ends with:\n{tail}" if tail else ""))

    def _kill(self) -> None:
        self._finalizer()
        for conn in (self._reader, self._writer):
            with contextlib.suppress(OSError):
                conn.close()
        self._stderr.close()


def _rebuild_error(label: str, method: str, payload: tuple[str, str, str]) -> EnvError:
    type_name, message, tb = payload
    cls = getattr(base, type_name, None)
    if isinstance(cls, type) and issubclass(cls, EnvError) and cls is not EnvRaised:
        return cls(message)
    return EnvRaised(f"{label}: {method}() raised {type_name}: {message}", type_name, tb)


# ---------------------------------------------------------------------- the child's side


def _kill_own_group() -> None:
    """Kill this process's descendants and its group (itself included)."""
    for proc in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            proc.kill()
    os.killpg(os.getpgrp(), signal.SIGKILL)


def _watch_parent(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(_PARENT_POLL_S)
    _kill_own_group()


def _serve(reader: Connection, writer: Connection) -> None:
    env: Any = None
    while True:
        try:
            method, args, kwargs = pickle.loads(reader.recv_bytes())
        except EOFError:
            return
        try:
            if method == "__start__":
                env, result = cloudpickle.loads(args[0])(), None
            elif method == "close":
                result = env.close() if env is not None else None
            else:
                result = getattr(env, method)(*args, **kwargs)
            reply = ("ok", result)
        except BaseException as e:
            reply = ("error", (type(e).__name__, str(e), traceback.format_exc()))
        try:
            data = cloudpickle.dumps(reply)
        except Exception as e:  # an unpicklable result
            data = cloudpickle.dumps(("error", (type(e).__name__, f"cannot send the result of {method}(): {e}", "")))
        writer.send_bytes(data)
        if method == "close":
            return


def main(argv: list[str]) -> None:
    os.dup2(2, 1)  # the environment's prints go to stderr, never into the pipe
    reader = Connection(int(argv[0]), writable=False)
    writer = Connection(int(argv[1]), readable=False)
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    try:
        _serve(reader, writer)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        _kill_own_group()


if __name__ == "__main__":
    main(sys.argv[1:])
