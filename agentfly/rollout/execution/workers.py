"""Where sync user code (tools, rewards) runs: a pool of worker processes.

:class:`WorkerPool` runs sync user code in persistent worker processes (started on first use,
reused across rollouts), one call per worker at a time. A call has two bounds
(:mod:`agentfly.rollout.execution.call_queue`): it waits for a worker at most ``queue_timeout``
seconds (past that it fails with :class:`WorkerQueueTimeout`: the pool is too small for the
calls in flight), and it runs at most its own ``timeout``, counted from the moment a worker takes
it (past that it fails with :class:`WorkerTimeout` and its worker's whole process group is
killed). Waiting calls are shared out by what they call (each tool, the reward), so a tool whose
calls hang never keeps another's from running. A worker that dies mid-call (``os._exit``, a
signal, a segfault) fails its call with :class:`WorkerDied`; the trainer never sees more than
the failure. A condemned worker (killed or dead) is replaced at once, and a started pool keeps
spare workers ready, so a replacement's start is never what a waiting call waits for. Each
worker has an address-space limit (``RLIMIT_AS``), so an allocation past it is a
``MemoryError`` in the worker, and a cap on the size of a reply, applied in the worker before
anything crosses the pipe. Workers kill themselves (and their process group) when the process
that started them is gone, however it ended.

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
from agentfly.rollout.execution.call_queue import Call, CallQueue
from agentfly.rollout.execution.worker_main import HEADER, RemoteError, ReplyTooLarge

logger = logging.getLogger(__name__)

DEFAULT_MEMORY_MB = 4096
DEFAULT_START_TIMEOUT_S = 60.0
DEFAULT_QUEUE_TIMEOUT_S = 600.0
IO_BOUND_MAX_WORKERS = 64  # the default pool of tools that wait: one worker per chain, up to this
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
    "WorkerQueueTimeout",
    "WorkerStartError",
    "WorkerTimeout",
    "default_num_workers",
    "default_pool",
    "default_spares",
    "describe_error",
]


class WorkerTimeout(TimeoutError):
    """A call ran past its deadline (counted from when a worker took it); its worker was killed."""


class WorkerQueueTimeout(RuntimeError):
    """A call waited past the pool's ``queue_timeout`` for a worker and never ran: the pool is
    too small for the calls in flight (not a verdict on the call)."""


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


def default_num_workers(io_bound: bool = False, calls_in_flight: int = 0) -> int:
    """Workers of a pool sized ``None``: the usable CPU count, within 2..8, for code that
    computes; for code that waits (``io_bound``: an HTTP call, a subprocess), one per call in
    flight (``calls_in_flight``, e.g. the chains running at once), up to
    :data:`IO_BOUND_MAX_WORKERS`, and never fewer than for code that computes."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 2
    cpu_bound = min(8, max(2, cores))
    if not io_bound:
        return cpu_bound
    return max(cpu_bound, min(IO_BOUND_MAX_WORKERS, int(calls_in_flight)))


def default_spares(num_workers: int) -> int:
    """Idle workers a started pool keeps ready beyond ``num_workers``: a quarter, 1 to 4."""
    return max(1, min(4, num_workers // 4))


# ---------------------------------------------------------------------------- the process pool


@dataclass
class _Worker:
    proc: subprocess.Popen[bytes]
    start_deadline: float
    state: str = "starting"  # starting | idle | busy
    job: Call | None = None
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
        num_workers: calls running at once (None: :func:`default_num_workers`); beyond it, one
            more call of each tool or reward that has none running (see
            :mod:`~agentfly.rollout.execution.call_queue`), ``num_workers`` more at most.
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
        queue_timeout: seconds a call may wait for a worker before :class:`WorkerQueueTimeout`.
        spares: idle workers a started pool (:meth:`start`) keeps ready beyond the busy ones,
            so that a killed or dead worker's replacement is already running (None:
            :func:`default_spares`).
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
        queue_timeout: float = DEFAULT_QUEUE_TIMEOUT_S,
        spares: int | None = None,
    ) -> None:
        size = default_num_workers() if num_workers is None else int(num_workers)
        if size < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers!r}")
        if not queue_timeout > 0:
            raise ValueError(f"queue_timeout must be positive, got {queue_timeout!r}")
        if spares is not None and spares < 0:
            raise ValueError(f"spares must be >= 0, got {spares!r}")
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
        self.queue_timeout = float(queue_timeout)
        self.spares = default_spares(size) if spares is None else int(spares)
        #: processes at most: the calls that may run (:mod:`.call_queue`) and the spares
        self.max_processes = 2 * size + self.spares
        #: since the pool was made: workers started, killed at a deadline, died mid-call; calls
        #: that waited past ``queue_timeout``; the longest wait of a call for a worker
        self.stats = {
            "started": 0, "timed_out": 0, "died": 0, "queue_timed_out": 0,
            "longest_wait_s": 0.0, "largest_reply_bytes": 0,
        }
        self._lock = threading.Lock()
        self._closed = False
        self._start_error: WorkerStartError | None = None
        self._reset()
        _POOLS.add(self)

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._queue = CallQueue(self.num_workers)
        self._workers: list[_Worker] = []
        self._thread: threading.Thread | None = None
        self._warm = False  # keep num_workers and the spares running (start() was called)
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
        """Run ``fn(*args, **kwargs)`` in a worker, for ``timeout`` seconds at most once a worker
        has taken it; it waits for one ``queue_timeout`` seconds at most. ``label`` names the
        call in errors, and calls of one label (one tool, one reward) share the workers fairly
        with other labels' (:mod:`~agentfly.rollout.execution.call_queue`).

        Returns:
            A future with the result, or the exception: the call's own (as raised in the worker,
            or a :class:`RemoteError` when it cannot be sent back), :class:`WorkerTimeout`,
            :class:`WorkerQueueTimeout`, :class:`WorkerDied`, :class:`ReplyTooLarge`,
            :class:`WorkerStartError` or :class:`PoolClosed`.

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
        now = time.monotonic()
        job = Call(
            future, HEADER.pack(len(frame)) + frame, float(timeout), label,
            submitted=now, queue_deadline=now + self.queue_timeout,
        )
        with self._lock:
            if self._closed:
                raise PoolClosed("the worker pool is closed")
            if self._pid != os.getpid():  # a forked child: the parent's workers are not ours
                self._reset()
            if self._start_error is not None:
                future.set_exception(self._start_error)
                return future
            self._queue.push(job)
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
            jobs = [*self._queue.drain(), *(w.job for w in workers if w.job is not None)]
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
                settled: list[tuple[Call, Any, BaseException | None]] = []
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
        due.append(self._queue.next_deadline())
        for w in self._workers:
            reads += [w.proc.stdout.fileno(), w.proc.stderr.fileno()]  # type: ignore[union-attr]
            if w.outbox is not None:
                writes.append(w.proc.stdin.fileno())  # type: ignore[union-attr]
        wait = min([_TICK_S, *(d - time.monotonic() for d in due)])
        return reads, writes, max(0.0, wait)

    def _step(self, settled: list[tuple[Call, Any, BaseException | None]]) -> None:
        """Deadlines, then dispatch: waiting calls to idle workers, new workers as needed."""
        now = time.monotonic()
        for w in list(self._workers):
            if w.state == "starting" and now >= w.start_deadline:
                self._start_failed(
                    w, f"it did not report ready within {self.start_timeout:g} s", settled
                )
            elif w.job is not None and now >= w.job.deadline:
                job = self._condemn(w)
                self.stats["timed_out"] += 1
                settled.append((job, None, WorkerTimeout(
                    f"{job.label} did not finish within {job.timeout:g} s of starting; its "
                    "worker was killed"
                )))
        for job in self._queue.expired(now):
            self.stats["queue_timed_out"] += 1
            settled.append((job, None, WorkerQueueTimeout(
                f"{job.label} waited {self.queue_timeout:g} s for a worker process and never "
                f"started ({self._queue.running} calls were running, num_workers="
                f"{self.num_workers}): the pool is too small for the calls in flight; raise "
                "agent.run_config.workers.num_workers (or workers.queue_timeout)"
            )))
        if self._start_error is not None:
            return
        idle = [w for w in self._workers if w.state == "idle"]
        while idle and (job := self._queue.pop()) is not None:
            if not job.future.set_running_or_notify_cancel():
                self._queue.finished(job)  # the caller cancelled it
                continue
            w, started = idle.pop(), time.monotonic()
            job.deadline = started + job.timeout  # its own time starts now
            waited = started - job.submitted
            self.stats["longest_wait_s"] = max(self.stats["longest_wait_s"], waited)
            w.state, w.job, w.outbox, w.forwarded = "busy", job, memoryview(job.frame), 0
        busy = sum(1 for w in self._workers if w.job is not None)
        wanted = busy + self._queue.startable()
        if self._warm:  # spares: a condemned worker's replacement is already running
            wanted = max(wanted + self.spares, self.num_workers + self.spares)
        while len(self._workers) < min(wanted, self.max_processes):
            self._spawn()

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
        settled: list[tuple[Call, Any, BaseException | None]],
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

    def _replies(self, w: _Worker, settled: list[tuple[Call, Any, BaseException | None]]) -> None:
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
                job = self._condemn(w)
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
        self, w: _Worker, frame: bytes, settled: list[tuple[Call, Any, BaseException | None]]
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
        self._queue.finished(job)
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

    def _gone(self, w: _Worker, settled: list[tuple[Call, Any, BaseException | None]]) -> None:
        """The worker closed its reply pipe: it died (or closed the pipe; it is killed then)."""
        try:
            code = w.proc.wait(timeout=0.2)
            how = _exit_description(code)
        except subprocess.TimeoutExpired:
            how = "it closed its reply pipe"
        if w.state == "starting":
            self._start_failed(w, f"it exited ({how})", settled)
            return
        job = self._condemn(w)
        if job is None:
            logger.warning("an idle tool/reward worker (pid %d) exited (%s)", w.pid, how)
            return
        self.stats["died"] += 1
        settled.append((job, None, WorkerDied(job.label, how)))

    def _start_failed(
        self, w: _Worker, why: str, settled: list[tuple[Call, Any, BaseException | None]]
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
        settled += [(job, None, self._start_error) for job in self._queue.drain()]

    def _condemn(self, w: _Worker) -> Call | None:
        """Discard ``w`` (killed at a deadline, dead, or not to be trusted); its call, if any,
        no longer runs. Its replacement starts in the next :meth:`_step`, before any waiting."""
        job, w.job = w.job, None
        if job is not None:
            self._queue.finished(job)
        self._discard(w)
        return job

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


async def wait_call(
    future: concurrent.futures.Future[Any], timeout: float, *, pool: WorkerPool | None
) -> Any:
    """Await a call's future from any event loop.

    A pool's future (``pool`` given) is settled by the pool: within ``pool.queue_timeout``
    waiting for a worker plus ``timeout`` running; this waits a few seconds longer only should
    the pool's own thread be gone. A thread's future (``pool=None``) is abandoned at
    ``timeout``.
    """
    import asyncio

    try:
        return await asyncio.wait_for(asyncio.wrap_future(future), _longest_wait(timeout, pool))
    except asyncio.TimeoutError as e:
        if future.done():  # the pool's own WorkerTimeout
            raise
        raise WorkerTimeout(f"no answer within {timeout:g} s") from e


def result_of(
    future: concurrent.futures.Future[Any], timeout: float, *, pool: WorkerPool | None
) -> Any:
    """:func:`wait_call` from sync code."""
    try:
        return future.result(_longest_wait(timeout, pool))
    except concurrent.futures.TimeoutError as e:
        if future.done():  # the call's own timeout
            raise
        raise WorkerTimeout(f"no answer within {timeout:g} s") from e


def _longest_wait(timeout: float, pool: WorkerPool | None) -> float:
    return timeout if pool is None else pool.queue_timeout + timeout + _GRACE_S
