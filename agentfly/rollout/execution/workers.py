"""Where sync user code (tools, rewards) runs: a pool of worker processes.

:class:`WorkerPool` runs sync user code in persistent worker processes (started on first use,
reused across rollouts), one call per worker at a time. Each call has a deadline counted from
its submission: a call still queued or running at its deadline fails with :class:`WorkerTimeout`,
and a running one has its worker's whole process group killed and replaced. A worker that dies
mid-call (``os._exit``, a signal, a segfault) fails its call with :class:`WorkerDied` and is
replaced; the trainer never sees more than the failure. Each worker has an address-space limit
(``RLIMIT_AS``), so an allocation past it is a ``MemoryError`` in the worker, and a cap on the
size of a reply, applied in the worker before anything crosses the pipe. Workers kill themselves
(and their process group) when the process that started them is gone, however it ended.

One manager thread per pool does all the I/O with ``select`` and a timeout, so it never blocks on
a worker; calls return ``concurrent.futures.Future`` (``asyncio.wrap_future`` from any loop).
The child side is :mod:`agentfly.rollout.execution.worker_main`.

Code declared safe to share the trainer's process (``runs_in="thread"``) runs on
:data:`agentfly.rollout.execution.daemon_threads.THREADS` instead.
"""

from __future__ import annotations

import atexit
import collections
import concurrent.futures
import contextlib
import fcntl
import importlib
import json
import logging
import os
import pickle
import select
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import cloudpickle

from agentfly.core.plugins import plugin_files
from agentfly.rollout.execution.worker_main import HEADER, RemoteError, ReplyTooLarge

logger = logging.getLogger(__name__)

DEFAULT_MEMORY_MB = 4096
DEFAULT_START_TIMEOUT_S = 60.0
DEFAULT_MAX_REPLY_BYTES = 16 * 1024 * 1024
_TICK_S = 0.25  # the manager's longest sleep with nothing due
_STDERR_TAIL_BYTES = 4096
_STDERR_FORWARD_BYTES = 64 * 1024  # a worker's stderr passed on per call at most
_GRACE_S = 5.0  # callers' own wait beyond a deadline, should the manager thread be gone

__all__ = [
    "NotPicklable",
    "PoolClosed",
    "RemoteError",
    "ReplyTooLarge",
    "WorkerDied",
    "WorkerPool",
    "WorkerStartError",
    "WorkerTimeout",
    "by_reference",
    "default_num_workers",
    "default_pool",
    "describe_error",
]


class WorkerTimeout(TimeoutError):
    """A call passed its deadline (queued or running); a running call's worker was killed."""


class WorkerDied(RuntimeError):
    """The worker running a call died before replying; ``how``: its exit code or signal."""

    def __init__(self, label: str, how: str) -> None:
        super().__init__(f"{label}: its worker process died ({how})")
        self.how = how


class WorkerStartError(RuntimeError):
    """A worker process did not start: the message says what failed and ends with its stderr."""


class NotPicklable(TypeError):
    """A call (its function or arguments) cannot be pickled to a worker process."""


class PoolClosed(RuntimeError):
    """The pool was closed before the call finished."""


def describe_error(exc: BaseException) -> str:
    """``TypeName: message`` of an exception, a worker's :class:`RemoteError` by its own type."""
    if isinstance(exc, RemoteError):
        return f"{exc.type_name}: {exc.message}"
    return f"{type(exc).__name__}: {exc}"


def default_num_workers() -> int:
    """Workers of a pool sized ``None``: the usable CPU count, within 2..8."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 2
    return min(8, max(2, cores))


# ---------------------------------------------------------------------------- functions by name


@dataclass(frozen=True)
class FunctionRef:
    """A function named by module and qualified name, resolved where it is called.

    cloudpickle copies a function by value when its module attribute is not the function itself,
    which is the case of every ``@tool`` (the attribute is the ``Tool``): by value, each call
    would also carry the module globals the function reads (an index, a table). By name, the
    worker imports the module once and calls the function it holds (a ``Tool``'s ``fn``).
    """

    module: str
    qualname: str

    def resolve(self) -> Callable[..., Any]:
        return _resolve(self.module, self.qualname)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.resolve()(*args, **kwargs)


_resolved: dict[tuple[str, str], Callable[..., Any]] = {}


def _resolve(module: str, qualname: str) -> Callable[..., Any]:
    key = (module, qualname)
    if key not in _resolved:
        obj: Any = sys.modules.get(module) or importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        fn = getattr(obj, "fn", obj)  # a Tool holds its function
        if not callable(fn):
            raise TypeError(f"{module}:{qualname} is not callable")
        _resolved[key] = fn
    return _resolved[key]


def by_reference(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` as a :class:`FunctionRef` when its module attribute is it (or a ``Tool`` holding
    it), else ``fn`` itself (cloudpickle copies it by value: a lambda, a local function)."""
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not module or module == "__main__" or "<locals>" in qualname or not qualname:
        return fn
    obj: Any = sys.modules.get(module)
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    if obj is fn or getattr(obj, "fn", None) is fn:
        return FunctionRef(module, qualname)
    return fn


# ---------------------------------------------------------------------------- the process pool


@dataclass
class _Job:
    future: concurrent.futures.Future[Any]
    frame: bytes
    deadline: float
    timeout: float
    label: str


@dataclass
class _Worker:
    proc: subprocess.Popen[bytes]
    start_deadline: float
    state: str = "starting"  # starting | idle | busy
    job: _Job | None = None
    inbox: bytearray = field(default_factory=bytearray)
    outbox: memoryview | None = None
    stderr_tail: collections.deque[bytes] = field(default_factory=collections.deque)
    forwarded: int = 0

    @property
    def pid(self) -> int:
        return self.proc.pid


class WorkerPool:
    """Worker processes for sync user code; see the module docstring.

    Args:
        num_workers: processes at most (None: :func:`default_num_workers`).
        memory_mb: each worker's address-space limit in MiB (``RLIMIT_AS``, set after its
            plugins are imported); 0 = none.
        start_timeout: seconds a worker may take to start (import its plugins) before
            :class:`WorkerStartError`.
        plugins: modules to import in every worker at start (``agent.init_config.plugins``);
            plugin files imported in this process later are imported by a worker before its
            next call.
        preload: further modules every worker imports at start (what the run's reward and
            tools import on their first call), so that no call pays for it.
        max_reply_bytes: the largest pickled result a call may send back.
    """

    def __init__(
        self,
        num_workers: int | None = None,
        *,
        memory_mb: int = DEFAULT_MEMORY_MB,
        start_timeout: float = DEFAULT_START_TIMEOUT_S,
        plugins: Iterable[str] = (),
        preload: Iterable[str] = (),
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
    ) -> None:
        size = default_num_workers() if num_workers is None else int(num_workers)
        if size < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers!r}")
        if memory_mb < 0:
            raise ValueError(f"memory_mb must be >= 0 (0: no limit), got {memory_mb!r}")
        if not start_timeout > 0:
            raise ValueError(f"start_timeout must be positive, got {start_timeout!r}")
        self.num_workers = size
        self.memory_mb = int(memory_mb)
        self.start_timeout = float(start_timeout)
        self.plugins = [str(p) for p in plugins]
        self.preload = list(dict.fromkeys(str(m) for m in preload))
        self.max_reply_bytes = int(max_reply_bytes)
        #: counts since the pool was made: workers started, killed at a deadline, died mid-call
        self.stats = {"started": 0, "timed_out": 0, "died": 0, "largest_reply_bytes": 0}
        self._lock = threading.Lock()
        self._closed = False
        self._start_error: WorkerStartError | None = None
        self._reset()
        _POOLS.add(self)

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._queue: collections.deque[_Job] = collections.deque()
        self._workers: list[_Worker] = []
        self._thread: threading.Thread | None = None
        self._warm = False  # keep num_workers running (start() was called)
        self._wake_r, self._wake_w = os.pipe()
        for fd in (self._wake_r, self._wake_w):
            _nonblocking(fd)

    # ---------------------------------------------------------------- public

    def submit(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        *,
        timeout: float,
        label: str = "call",
    ) -> concurrent.futures.Future[Any]:
        """Run ``fn(*args, **kwargs)`` in a worker within ``timeout`` seconds from now.

        Returns:
            A future with the result, or the exception: the call's own (as raised in the worker,
            or a :class:`RemoteError` when it cannot be sent back), :class:`WorkerTimeout`,
            :class:`WorkerDied`, :class:`ReplyTooLarge`, :class:`WorkerStartError` or
            :class:`PoolClosed`.

        Raises:
            NotPicklable: the call cannot be sent (it holds a lock, a socket...).
            PoolClosed: the pool is closed.
        """
        try:
            payload = cloudpickle.dumps((fn, tuple(args), dict(kwargs or {})))
        except Exception as e:
            raise NotPicklable(
                f"{label} cannot be sent to a worker process ({describe_error(e)}); code that "
                "cannot be pickled runs in the trainer with runs_in='thread'"
            ) from e
        frame = pickle.dumps((plugin_files(), payload), protocol=pickle.HIGHEST_PROTOCOL)
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        job = _Job(future, HEADER.pack(len(frame)) + frame, time.monotonic() + timeout, timeout, label)
        with self._lock:
            if self._closed:
                raise PoolClosed("the worker pool is closed")
            if self._pid != os.getpid():  # a forked child: the parent's workers are not ours
                self._reset()
            if self._start_error is not None:
                future.set_exception(self._start_error)
                return future
            self._queue.append(job)
            self._ensure_thread()
        self._wake()
        return future

    def start(self) -> None:
        """Start every worker now, in the background (their imports overlap other work)."""
        with self._lock:
            if self._closed or self._start_error is not None:
                return
            if self._pid != os.getpid():
                self._reset()
            self._warm = True
            self._ensure_thread()
        self._wake()

    def _ensure_thread(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._serve, name="agentfly-worker-pool", daemon=True
            )
            self._thread.start()

    def pids(self) -> list[int]:
        """Process ids of the live workers."""
        with self._lock:
            return [w.pid for w in self._workers]

    def close(self) -> None:
        """Kill every worker (process groups) and fail what is pending; never waits on a call."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            workers, self._workers = self._workers, []
            jobs = [*self._queue, *(w.job for w in workers if w.job is not None)]
            self._queue.clear()
            mine = self._pid == os.getpid()
        for job in jobs:
            _settle(job.future, error=PoolClosed(f"{job.label}: the worker pool was closed"))
        if mine:
            for w in workers:
                _kill(w)
            self._wake()
            deadline = time.monotonic() + 1.0
            for w in workers:
                _reap(w, max(0.0, deadline - time.monotonic()))
        _POOLS.discard(self)

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- the manager thread

    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # a full pipe: already awake
            os.write(self._wake_w, b"x")

    def _serve(self) -> None:
        try:
            while True:
                settled: list[tuple[_Job, Any, BaseException | None]] = []
                with self._lock:
                    if self._closed:
                        return
                    self._step(settled)
                    reads, writes, wait = self._interest()
                for job, value, error in settled:  # callbacks run outside the lock
                    _settle(job.future, value, error)
                settled = []
                try:
                    readable, writable, _ = select.select(reads, writes, [], wait)
                except (OSError, ValueError):  # a worker closed under us: look again
                    readable, writable = [], []
                if self._wake_r in readable:
                    _drain(self._wake_r)
                with self._lock:
                    if self._closed:
                        return
                    self._io(readable, writable, settled)
                for job, value, error in settled:
                    _settle(job.future, value, error)
        except BaseException:
            logger.exception("the worker pool's manager thread failed; failing its calls")
            self.close()

    def _interest(self) -> tuple[list[int], list[int], float]:
        reads, writes = [self._wake_r], []
        due = [w.start_deadline for w in self._workers if w.state == "starting"]
        due += [w.job.deadline for w in self._workers if w.job is not None]
        due += [j.deadline for j in self._queue]
        for w in self._workers:
            reads += [w.proc.stdout.fileno(), w.proc.stderr.fileno()]  # type: ignore[union-attr]
            if w.outbox is not None:
                writes.append(w.proc.stdin.fileno())  # type: ignore[union-attr]
        wait = min([_TICK_S, *(d - time.monotonic() for d in due)])
        return reads, writes, max(0.0, wait)

    def _step(self, settled: list[tuple[_Job, Any, BaseException | None]]) -> None:
        """Deadlines, then dispatch: queued jobs to idle workers, new workers as needed."""
        now = time.monotonic()
        for w in list(self._workers):
            if w.state == "starting" and now >= w.start_deadline:
                self._start_failed(
                    w, f"it did not report ready within {self.start_timeout:g} s", settled
                )
            elif w.job is not None and now >= w.job.deadline:
                job = w.job
                self._discard(w)
                self.stats["timed_out"] += 1
                settled.append((job, None, WorkerTimeout(
                    f"{job.label} did not finish within {job.timeout:g} s; its worker was killed"
                )))
        if any(j.deadline <= now for j in self._queue):  # calls of any timeout, in any order
            waiting = list(self._queue)
            self._queue = collections.deque(j for j in waiting if j.deadline > now)
            settled += [(job, None, WorkerTimeout(
                f"{job.label} did not start within {job.timeout:g} s: all "
                f"{self.num_workers} workers were busy"
            )) for job in waiting if job.deadline <= now]
        if self._start_error is not None:
            return
        while self._queue:
            idle = next((w for w in self._workers if w.state == "idle"), None)
            if idle is None:
                break
            job = self._queue.popleft()
            if not job.future.set_running_or_notify_cancel():
                continue  # the caller cancelled it
            idle.state, idle.job, idle.outbox = "busy", job, memoryview(job.frame)
            idle.forwarded = 0
        starting = sum(1 for w in self._workers if w.state == "starting")
        wanted = self.num_workers if self._warm else len(self._queue) - starting + len(self._workers)
        while len(self._workers) < min(wanted, self.num_workers):
            self._spawn()
            starting += 1

    def _spawn(self) -> None:
        paths = [os.path.abspath(p) if p else os.getcwd() for p in sys.path]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(dict.fromkeys(paths)))
        cmd = [
            sys.executable, "-m", "agentfly.rollout.execution.worker_main", str(os.getpid()),
            str(self.memory_mb), str(self.max_reply_bytes),
            json.dumps({"plugins": self.plugins, "preload": self.preload}),
        ]
        proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=env, start_new_session=True, close_fds=True,
        )
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            _nonblocking(stream.fileno())  # type: ignore[union-attr]
        self._workers.append(_Worker(proc, time.monotonic() + self.start_timeout))
        self.stats["started"] += 1

    def _io(
        self, readable: list[int], writable: list[int],
        settled: list[tuple[_Job, Any, BaseException | None]],
    ) -> None:
        for w in list(self._workers):
            if w not in self._workers:
                continue
            err_fd, out_fd = w.proc.stderr.fileno(), w.proc.stdout.fileno()  # type: ignore[union-attr]
            if err_fd in readable:
                self._stderr(w)
            if w.outbox is not None and w.proc.stdin.fileno() in writable:  # type: ignore[union-attr]
                try:
                    sent = os.write(w.proc.stdin.fileno(), w.outbox)  # type: ignore[union-attr]
                    w.outbox = w.outbox[sent:] if sent < len(w.outbox) else None
                except BlockingIOError:
                    pass
                except OSError:  # the worker is gone; its stdout says so next
                    w.outbox = None
            if out_fd in readable:
                self._replies(w, settled)

    def _stderr(self, w: _Worker) -> bool:
        """Read what ``w`` wrote to stderr (kept as its tail, passed on); whether there was any."""
        try:
            data = os.read(w.proc.stderr.fileno(), 65536)  # type: ignore[union-attr]
        except (BlockingIOError, OSError, ValueError):
            return False
        if not data:
            return False
        w.stderr_tail.append(data)
        while sum(map(len, w.stderr_tail)) > _STDERR_TAIL_BYTES and len(w.stderr_tail) > 1:
            w.stderr_tail.popleft()
        if w.state == "starting":
            return True
        room = _STDERR_FORWARD_BYTES - w.forwarded
        w.forwarded += len(data)
        if room > 0:
            text = data[:room].decode("utf-8", "replace")
            if len(data) > room:
                text += f"\n[worker {w.pid}: further stderr of this call is not shown]\n"
            with contextlib.suppress(Exception):
                sys.stderr.write(text)
        return True

    def _replies(self, w: _Worker, settled: list[tuple[_Job, Any, BaseException | None]]) -> None:
        try:
            data = os.read(w.proc.stdout.fileno(), 1 << 20)  # type: ignore[union-attr]
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._gone(w, settled)
            return
        w.inbox += data
        while len(w.inbox) >= HEADER.size:
            (size,) = HEADER.unpack_from(w.inbox)
            if size > self.max_reply_bytes + 4096:  # the worker enforces the cap; never trust it
                job = w.job
                self._discard(w)
                if job is not None:
                    settled.append((job, None, ReplyTooLarge(size, self.max_reply_bytes)))
                return
            if len(w.inbox) < HEADER.size + size:
                return
            frame = bytes(w.inbox[HEADER.size : HEADER.size + size])
            del w.inbox[: HEADER.size + size]
            self.stats["largest_reply_bytes"] = max(self.stats["largest_reply_bytes"], size)
            self._reply(w, frame, settled)

    def _reply(
        self, w: _Worker, frame: bytes, settled: list[tuple[_Job, Any, BaseException | None]]
    ) -> None:
        try:
            reply = pickle.loads(frame)
        except BaseException as exc:
            reply = ("error", b"", type(exc).__name__, f"its reply cannot be read here: {exc}")
        if w.state == "starting":
            if reply[0] == "ready":
                w.state = "idle"
            else:
                self._start_failed(w, f"it raised while starting: {reply[1]}", settled)
            return
        job, w.job, w.state = w.job, None, "idle"
        if job is None:
            return
        if reply[0] == "ok":
            settled.append((job, reply[1], None))
            return
        _, exc_bytes, type_name, message = reply
        try:
            error = pickle.loads(exc_bytes)
        except BaseException:
            error = RemoteError(type_name, message)
        if not isinstance(error, BaseException):
            error = RemoteError(type_name, message)
        settled.append((job, None, error))

    def _gone(self, w: _Worker, settled: list[tuple[_Job, Any, BaseException | None]]) -> None:
        """The worker closed its reply pipe: it died (or closed the pipe; it is killed then)."""
        try:
            code = w.proc.wait(timeout=0.2)
            how = _exit_description(code)
        except subprocess.TimeoutExpired:
            how = "it closed its reply pipe"
        if w.state == "starting":
            self._start_failed(w, f"it exited ({how})", settled)
            return
        job = w.job
        self._discard(w)
        if job is None:
            logger.warning("an idle tool/reward worker (pid %d) exited (%s)", w.pid, how)
            return
        self.stats["died"] += 1
        settled.append((job, None, WorkerDied(job.label, how)))

    def _start_failed(
        self, w: _Worker, why: str, settled: list[tuple[_Job, Any, BaseException | None]]
    ) -> None:
        for _ in range(20):  # what the worker wrote last, up to 0.1 s
            if not self._stderr(w):
                time.sleep(0.005)
        self._discard(w)
        tail = b"".join(w.stderr_tail).decode("utf-8", "replace").strip()
        plugins = f" (plugins: {', '.join(self.plugins)})" if self.plugins else ""
        self._start_error = WorkerStartError(
            f"a tool/reward worker process ({sys.executable} -m agentfly.rollout.execution.worker_main)"
            f"{plugins} failed to start: {why}."
            + (f" Its stderr ended with:\n{tail}" if tail else " It wrote nothing to stderr.")
        )
        while self._queue:
            settled.append((self._queue.popleft(), None, self._start_error))

    def _discard(self, w: _Worker) -> None:
        """Kill ``w``'s process group and forget it (reaped now if already dead, else later)."""
        _kill(w)
        self._workers.remove(w)
        _reap(w, 0.2)


_POOLS: weakref.WeakSet[WorkerPool] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for pool in list(_POOLS):
        pool.close()


def _nonblocking(fd: int) -> None:
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except (BlockingIOError, OSError):
        pass


def _kill(w: _Worker) -> None:
    for signal_to in (os.killpg, os.kill):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            signal_to(w.pid, signal.SIGKILL)
    for stream in (w.proc.stdin, w.proc.stdout, w.proc.stderr):
        with contextlib.suppress(OSError):
            stream.close()  # type: ignore[union-attr]


def _reap(w: _Worker, timeout: float) -> None:
    try:
        w.proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        logger.warning("worker %d did not exit within %.1f s of SIGKILL", w.pid, timeout)


def _exit_description(code: int) -> str:
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _settle(
    future: concurrent.futures.Future[Any], value: Any = None, error: BaseException | None = None
) -> None:
    if future.done():
        return
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)
    except concurrent.futures.InvalidStateError:  # cancelled meanwhile
        pass


_default: WorkerPool | None = None
_default_lock = threading.Lock()


def default_pool() -> WorkerPool:
    """The process's shared pool (default size and limits), made on first use, for callers that
    are given none (direct calls of ``run_tool_call`` and ``compute_reward``)."""
    global _default
    with _default_lock:
        if _default is None or _default._closed:
            _default = WorkerPool()
        return _default


async def wait_call(future: concurrent.futures.Future[Any], timeout: float, *, pool: bool) -> Any:
    """Await a call's future from any event loop, ``timeout`` seconds at most.

    A pool's future (``pool=True``) is settled by the pool at its deadline; this waits a few
    seconds longer only should the pool's own thread be gone. A thread's future is abandoned
    at the timeout.
    """
    import asyncio

    try:
        return await asyncio.wait_for(asyncio.wrap_future(future), timeout + _grace(pool))
    except asyncio.TimeoutError as e:
        raise WorkerTimeout(f"no answer within {timeout:g} s") from e


def result_of(future: concurrent.futures.Future[Any], timeout: float, *, pool: bool) -> Any:
    """:func:`wait_call` from sync code."""
    try:
        return future.result(timeout + _grace(pool))
    except concurrent.futures.TimeoutError as e:
        if future.done():  # the call's own timeout
            raise
        raise WorkerTimeout(f"no answer within {timeout:g} s") from e


def _grace(pool: bool) -> float:
    return _GRACE_S if pool else 0.0
