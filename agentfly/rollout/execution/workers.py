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
the failure. A condemned worker (killed or dead) is replaced at once (forked in milliseconds:
:mod:`.worker_starts`), and a started pool keeps spare workers ready. A call idle on the CPU
lends its place (:mod:`.lending`), within the pool's memory budget (:mod:`.memory_budget`).
Each worker has an address-space limit (``RLIMIT_AS``), so an allocation past it is a
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
import concurrent.futures
import contextlib
import logging
import os
import pickle
import select
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from typing import Any

import cloudpickle

from agentfly.core.plugins import plugin_files
from agentfly.rollout.execution import memory_budget
from agentfly.rollout.execution.call_queue import Call, CallQueue
from agentfly.rollout.execution.lending import Lender
from agentfly.rollout.execution.sizing import (
    IO_BOUND_MAX_WORKERS,
    default_num_workers,
    default_spares,
)
from agentfly.rollout.execution.waiting import result_of, settle, wait_call
from agentfly.rollout.execution.worker_errors import (
    NotPicklable,
    PoolClosed,
    WorkerDied,
    WorkerQueueTimeout,
    WorkerStartError,
    WorkerTimeout,
    describe_error,
)
from agentfly.rollout.execution.worker_main import HEADER, RemoteError, ReplyTooLarge
from agentfly.rollout.execution.worker_process import (
    Worker,
    decode_reply,
    drain,
    how_it_ended,
    kill,
    nonblocking,
    read_replies,
    read_stderr,
    reap,
    reply_error,
    send_request,
)
from agentfly.rollout.execution.worker_starts import Starter

logger = logging.getLogger(__name__)

DEFAULT_MEMORY_MB = 4096
DEFAULT_START_TIMEOUT_S = 60.0
DEFAULT_QUEUE_TIMEOUT_S = 600.0
DEFAULT_MAX_REPLY_BYTES = 16 * 1024 * 1024
DEFAULT_LEND_AFTER_S = 0.1
_TICK_S = 0.25  # the manager's longest sleep with nothing due

__all__ = [  # the exceptions, sizes and waits of a call live in their own modules
    "NotPicklable", "PoolClosed", "RemoteError", "ReplyTooLarge", "WorkerDied", "WorkerPool",
    "WorkerQueueTimeout", "WorkerStartError", "WorkerTimeout", "default_num_workers",
    "default_pool", "default_spares", "describe_error", "result_of", "wait_call",
]


# ---------------------------------------------------------------------------- the process pool


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
        lend_after: seconds a call runs idle on the CPU before it lends its place (:mod:`.lending`).
        max_lent: calls lent at once at most (None: 64; 0: none).
        memory_budget_mb: MiB the workers may claim together (None: the machine's; :mod:`.memory_budget`).
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
        lend_after: float = DEFAULT_LEND_AFTER_S,
        max_lent: int | None = None,
        memory_budget_mb: int | None = None,
    ) -> None:
        size = default_num_workers() if num_workers is None else int(num_workers)
        for name, value, ok, rule in (
            ("num_workers", num_workers, size >= 1, ">= 1"),
            ("spares", spares, spares is None or spares >= 0, ">= 0"),
            ("max_lent", max_lent, max_lent is None or max_lent >= 0, ">= 0"),
            ("memory_mb", memory_mb, memory_mb >= 0, ">= 0 (0: no limit)"),
            *((n, v, v > 0, "positive") for n, v in (
                ("queue_timeout", queue_timeout), ("start_timeout", start_timeout),
                ("lend_after", lend_after),
            )),
        ):
            if not ok:
                raise ValueError(f"{name} must be {rule}, got {value!r}")
        self.num_workers = size
        self.memory_mb = int(memory_mb)
        self.start_timeout = float(start_timeout)
        self.plugins = [str(p) for p in plugins]
        self.preload = list(dict.fromkeys(str(m) for m in preload))
        self.max_reply_bytes = int(max_reply_bytes)
        self.queue_timeout = float(queue_timeout)
        self.spares = default_spares(size) if spares is None else int(spares)
        self.lend_after = float(lend_after)
        self.max_lent = IO_BOUND_MAX_WORKERS if max_lent is None else int(max_lent)
        self.memory_budget_mb = int(memory_budget_mb or memory_budget.machine_memory_mb())
        #: processes at most (the fork server aside): the calls that may run, the spares and
        #: the lent calls (:mod:`.call_queue`); fewer within the memory budget
        self.max_processes = 2 * size + self.spares + self.max_lent
        memory_budget.warn_over_budget(size, self.memory_mb, self.memory_budget_mb)
        #: since the pool was made: workers started, killed at a deadline, died mid-call; calls
        #: that waited past ``queue_timeout``; the longest wait of a call for a worker
        self.stats = dict.fromkeys(("started", "timed_out", "died", "queue_timed_out"), 0)
        self.stats.update(longest_wait_s=0.0, largest_reply_bytes=0)
        self._lock = threading.Lock()
        self._closed = False
        self._reset()
        _POOLS.add(self)

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._queue = CallQueue(self.num_workers)
        self._workers: list[Worker] = []
        self._starter = Starter(self.memory_mb, self.max_reply_bytes, self.plugins, self.preload,
                                self.start_timeout)
        self._lender = Lender(self.lend_after, self.max_lent)
        self._thread: threading.Thread | None = None
        self._warm = False  # keep num_workers and the spares running (start() was called)
        self._wake_r, self._wake_w = os.pipe()
        for fd in (self._wake_r, self._wake_w):
            nonblocking(fd)

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
            if self._starter.error is not None:
                future.set_exception(self._starter.error)
                return future
            self._queue.push(job)
            self._ensure_thread()
        self._wake()
        return future

    def start(self) -> None:
        """Start every worker now, in the background (their imports overlap other work)."""
        with self._lock:
            if self._closed or self._starter.error is not None:
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
            starter = self._starter
        for job in jobs:
            settle(job.future, error=PoolClosed(f"{job.label}: the worker pool was closed"))
        if mine:
            for w in workers:
                kill(w)
            self._wake()
            deadline = time.monotonic() + 1.0
            for w in workers:
                reap(w, max(0.0, deadline - time.monotonic()))
            starter.close()
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
                    settle(job.future, value, error)
                settled = []
                try:
                    readable, writable, _ = select.select(reads, writes, [], wait)
                except (OSError, ValueError):  # a worker closed under us: look again
                    readable, writable = [], []
                if self._wake_r in readable:
                    drain(self._wake_r)
                with self._lock:
                    if self._closed:
                        return
                    self._io(readable, writable, settled)
                for job, value, error in settled:
                    settle(job.future, value, error)
        except BaseException:
            logger.exception("the worker pool's manager thread failed; failing its calls")
            self.close()

    def _interest(self) -> tuple[list[int], list[int], float]:
        reads, writes = [self._wake_r, *self._starter.fds()], []
        due = [w.start_deadline for w in self._workers if w.state == "starting"]
        due += [w.job.deadline for w in self._workers if w.job is not None]
        due += [self._queue.next_deadline(), self._lender.next_look(self._workers)]
        for w in self._workers:
            reads += [w.proc.stdout.fileno(), w.proc.stderr.fileno()]  # type: ignore[union-attr]
            if w.outbox is not None:
                writes.append(w.proc.stdin.fileno())  # type: ignore[union-attr]
        wait = min([_TICK_S, *(d - time.monotonic() for d in due)])
        return reads, writes, max(0.0, wait)

    def _step(self, settled: list[tuple[Call, Any, BaseException | None]]) -> None:
        """Deadlines, then dispatch: waiting calls to idle workers, new workers as needed."""
        now = time.monotonic()
        self._starter.step(now)
        for w in list(self._workers):
            if w.state == "starting" and now >= w.start_deadline:
                self._start_failed(w, f"it did not report ready within "
                                   f"{self._starter.attempts.timeout:g} s", settled)
            elif w.job is not None and now >= w.job.deadline:
                job = self._condemn(w)
                self.stats["timed_out"] += 1
                settled.append((job, None, WorkerTimeout.of(job.label, job.timeout)))
        for job in self._queue.expired(now):
            self.stats["queue_timed_out"] += 1
            settled.append((job, None, WorkerQueueTimeout.of(
                job.label, self.queue_timeout, self._queue.running, self.num_workers
            )))
        if self._starter.error is not None:
            settled += [(job, None, self._starter.error) for job in self._queue.drain()]
            return
        self._lender.step(self._workers, self._queue, now)
        busy = sum(1 for w in self._workers if w.job is not None)
        wanted = busy + self._queue.startable()  # workers the running and startable calls need
        if self._warm:  # spares: a condemned worker's replacement is already running
            wanted = max(wanted + self.spares, self.num_workers + self.spares)
        for w in memory_budget.surplus(self._workers, wanted, self.memory_mb, self.memory_budget_mb, self.num_workers):
            self._discard(w)  # idle, and not needed or past the memory budget
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
            w.mark = None  # the lender's first look comes next
        while (
            len(self._workers) < min(wanted, self.max_processes)
            and memory_budget.may_start(
                self._workers, self.memory_mb, self.memory_budget_mb, self.num_workers
            )
            and self._starter.ready()
        ):
            self._workers.append(self._starter.spawn())
            self.stats["started"] += 1

    def _io(
        self, readable: list[int], writable: list[int],
        settled: list[tuple[Call, Any, BaseException | None]],
    ) -> None:
        self._starter.io(readable)
        for w in list(self._workers):
            if w not in self._workers:
                continue
            err_fd, out_fd = w.proc.stderr.fileno(), w.proc.stdout.fileno()  # type: ignore[union-attr]
            if err_fd in readable:
                read_stderr(w)
            if w.outbox is not None and w.proc.stdin.fileno() in writable:  # type: ignore[union-attr]
                send_request(w)
            if out_fd in readable:
                self._replies(w, settled)

    def _replies(self, w: Worker, settled: list[tuple[Call, Any, BaseException | None]]) -> None:
        try:
            frames = read_replies(w, self.max_reply_bytes)
        except ReplyTooLarge as too_large:
            if (job := self._condemn(w)) is not None:
                settled.append((job, None, too_large))
            return
        if frames is None:
            self._gone(w, settled)
        for frame in frames or ():
            largest = max(self.stats["largest_reply_bytes"], len(frame))
            self.stats["largest_reply_bytes"] = largest
            self._reply(w, frame, settled)

    def _reply(
        self, w: Worker, frame: bytes, settled: list[tuple[Call, Any, BaseException | None]]
    ) -> None:
        reply = decode_reply(frame)
        if w.state == "starting":
            if reply[0] == "ready":
                w.state = "idle"
                self._starter.started()
            else:
                self._start_failed(w, f"it raised while starting: {reply[1]}", settled, raised=True)
            return
        job, w.job, w.state = w.job, None, "idle"
        if job is None:
            return
        self._queue.finished(job)
        settled.append((job, reply[1], None) if reply[0] == "ok" else (job, None, reply_error(reply)))

    def _gone(self, w: Worker, settled: list[tuple[Call, Any, BaseException | None]]) -> None:
        """The worker closed its reply pipe: it died (or closed the pipe; it is killed then)."""
        how = how_it_ended(w)
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
        self, w: Worker, why: str, settled: list[tuple[Call, Any, BaseException | None]],
        raised: bool = False,
    ) -> None:
        """``w`` did not start: an import raised, or it was late or died (:mod:`.worker_starts`)."""
        self._discard(w)
        self._starter.worker_failed(w, why, raised)
        if self._starter.error is not None:
            settled += [(job, None, self._starter.error) for job in self._queue.drain()]

    def _condemn(self, w: Worker) -> Call | None:
        """Discard ``w`` (killed at a deadline, dead, or not to be trusted); its call, if any,
        no longer runs. Its replacement starts in the next :meth:`_step`, before any waiting."""
        job, w.job = w.job, None
        if job is not None:
            self._queue.finished(job)
        self._discard(w)
        return job

    def _discard(self, w: Worker) -> None:
        """Kill ``w``'s process group and forget it (reaped now if already dead, else later; a
        forked worker by the fork server)."""
        kill(w)
        self._workers.remove(w)
        if not w.forked:
            reap(w, 0.2)


_POOLS: weakref.WeakSet[WorkerPool] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for pool in list(_POOLS):
        pool.close()


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


