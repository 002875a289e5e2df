"""How a run ends, however it ends: SIGTERM becomes an orderly exit, and a Ray that agentfly
started is stopped within a deadline with none of its processes left behind.

- :func:`sigterm_exits` (the CLI's ``fit``/``rollout``/``sft`` commands): SIGTERM raises
  ``SystemExit`` in the main thread, so every ``finally`` runs (engines, tool workers, Ray), and
  arms a watchdog: a stop still going ``EXIT_DEADLINE_S`` after the signal is cut short, saying
  where each thread was, killing every process this one started and exiting 143. ``ray.init``
  replaces the handler with its own first thing (``sys.exit(15)``, no word said) and keeps it
  while Ray starts, seconds; where agentfly starts Ray, :func:`sigterm_kept` stops it doing so,
  and :func:`reclaim_sigterm` puts this one back afterwards. Inside ``trainer.fit`` Lightning calls it after its own notifier (which alone
  would wait for the end of the batch, a whole rollout, and exit with status 0). SLURM's requeue
  signal (SIGUSR1, :mod:`agentfly.callbacks.requeue`) is left alone.
- :func:`ray_stopped_at_exit`: when Ray was not initialised on entry and is on exit (an engine
  pool, a resource pool or anything else started or joined it), :func:`stop_ray` runs.
- :func:`stop_ray`: ``ray.shutdown()`` in a helper thread under a deadline; then the Ray
  processes this process started (head, raylet, GCS, dashboard and runtime-env agents, workers:
  found among its descendants before the shutdown) get a few seconds to exit and are killed
  otherwise, saying which. An abandoned ``ray.shutdown()`` keeps Ray's lock, on which Ray's own
  ``atexit`` hook waits at the interpreter's exit (until Ray's client aborts the process a minute
  later, exit status 1); the ``agentfly`` command gives up on it at its exit's deadline
  (:mod:`agentfly.core.process_exit`). Unregistering that hook instead lets the interpreter tear
  its modules down under Ray's live client threads, which crashes it (SIGSEGV). A Ray joined
  through ``RAY_ADDRESS`` is only disconnected from.
- :func:`on_ray_started`: where agentfly starts Ray; also starts :mod:`agentfly.core.reaper`, which
  kills Ray's processes if this process dies without stopping them (SIGKILL, the OOM killer).
"""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

logger = logging.getLogger(__name__)

RAY_SHUTDOWN_TIMEOUT_S = 30.0  # ray.shutdown() may take this long before Ray's processes are killed
RAY_EXIT_GRACE_S = 5.0  # after ray.shutdown(), how long Ray's processes may take to exit
# From a SIGTERM to the end of the orderly stop (engines, tool workers, Ray): past it the watchdog
# kills every process this one started and exits 143. The stop's own deadlines are shorter in
# the common case (an engine's close and ray.shutdown() 30 s each, at most); this bounds their sum.
EXIT_DEADLINE_S = 60.0
# Past EXIT_DEADLINE_S, faulthandler ends (status 1) a process whose watchdog thread cannot run
# (a thread that never lets go of the GIL), dumping every thread's stack first.
EXIT_BACKSTOP_S = 10.0


def ray_is_initialized() -> bool:
    """Whether Ray is initialised in this process (without importing Ray when nothing did)."""
    ray = sys.modules.get("ray")
    return bool(ray is not None and ray.is_initialized())


def _runs_ray_here() -> bool:
    """Whether this process started the Ray it is connected to (a head node of its own), rather
    than joined a cluster, none of whose processes are its own."""
    from ray._private import worker

    return bool(getattr(worker._global_node, "head", False))


_reaper: subprocess.Popen | None = None  # agentfly.core.reaper watching this process's Ray


def on_ray_started() -> None:
    """Call where agentfly has just started Ray (``ray.init``): put :func:`sigterm_exits`'s
    handler back (:func:`reclaim_sigterm`), and when the Ray runs on this machine, start
    :mod:`agentfly.core.reaper`, which kills its processes should this one die without stopping it
    (SIGKILL); :func:`stop_ray` ends the reaper."""
    global _reaper
    reclaim_sigterm()
    if not _runs_ray_here() or (_reaper is not None and _reaper.poll() is None):
        return  # joined a cluster: none of its processes are ours; or already watched
    _reaper = subprocess.Popen(
        [sys.executable, "-m", "agentfly.core.reaper", str(os.getpid())],
        stdin=subprocess.DEVNULL, start_new_session=True,  # outlives this process's group
    )


def _stop_reaper() -> None:
    global _reaper
    if _reaper is not None:
        _reaper.kill()
        _reaper.wait()
        _reaper = None


def stop_ray(timeout_s: float = RAY_SHUTDOWN_TIMEOUT_S, grace_s: float = RAY_EXIT_GRACE_S) -> None:
    """``ray.shutdown()`` within ``timeout_s``, then no Ray process of this one is left.

    Args:
        timeout_s: how long ``ray.shutdown()`` may take; past it the shutdown is abandoned (its
            thread is a daemon) and Ray's processes are killed.
        grace_s: how long Ray's processes may take to exit after the shutdown before they are
            killed.
    """
    if not ray_is_initialized():
        _stop_reaper()  # Ray was shut down elsewhere: nothing left to watch
        return
    import psutil

    from agentfly.core.reaper import ray_descendants

    procs = ray_descendants(psutil.Process()) if _runs_ray_here() else []
    done = threading.Event()

    def shutdown() -> None:
        try:
            import ray

            ray.shutdown()
        except Exception:  # the processes are reaped below whatever happened
            logger.warning("ray.shutdown() failed", exc_info=True)
        finally:
            done.set()

    threading.Thread(target=shutdown, name="agentfly-ray-shutdown", daemon=True).start()
    if not done.wait(timeout_s):
        logger.warning(
            "ray.shutdown() did not finish within %g s: killing Ray's processes %s",
            timeout_s, [p.pid for p in procs],
        )
        grace_s = 0.0
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    _stop_reaper()
    if not alive:
        return
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(alive, timeout=5)
    if grace_s:
        logger.warning(
            "Ray processes still running %g s after ray.shutdown(): killed %s",
            grace_s, [p.pid for p in alive],
        )


@contextlib.contextmanager
def ray_stopped_at_exit(timeout_s: float = RAY_SHUTDOWN_TIMEOUT_S) -> Iterator[None]:
    """Stop Ray on leaving (:func:`stop_ray`) if it was not initialised on entering.

    While stopping, a further SIGTERM is said and ignored, so it cannot cut the shutdown short.
    """
    before = ray_is_initialized()
    try:
        yield
    finally:
        if not before and ray_is_initialized():
            with _sigterm_ignored():
                stop_ray(timeout_s)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def _sigterm_ignored() -> Iterator[None]:
    if not _in_main_thread():
        yield
        return

    def say(signum: int, frame: Any) -> None:
        logger.warning("SIGTERM while stopping Ray: the shutdown goes on")

    previous = signal.signal(signal.SIGTERM, say)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class _ExitWatchdog:
    """Armed by a SIGTERM: unless disarmed within ``deadline_s``, it says where each thread is,
    kills every descendant of this process (Ray's, the tool workers', the environments') and
    exits 143. A thread of its own does it; should that thread never get the GIL, faulthandler
    dumps the stacks and exits (status 1) ``EXIT_BACKSTOP_S`` later."""

    def __init__(self, deadline_s: float) -> None:
        self.deadline_s = deadline_s
        self._disarmed = threading.Event()
        self._armed = False

    def arm(self) -> None:
        self._armed = True
        threading.Thread(target=self._watch, name="agentfly-exit-watchdog", daemon=True).start()
        with contextlib.suppress(AttributeError, ValueError, OSError):  # no file descriptor
            faulthandler.dump_traceback_later(self.deadline_s + EXIT_BACKSTOP_S, exit=True)

    def disarm(self) -> None:
        self._disarmed.set()
        if self._armed:
            faulthandler.cancel_dump_traceback_later()

    def _watch(self) -> None:
        if self._disarmed.wait(self.deadline_s):
            return
        import psutil

        procs = psutil.Process().children(recursive=True)
        logger.error(
            "the run did not stop within %g s of SIGTERM: killing its processes %s and exiting "
            "143; where each thread was:", self.deadline_s, [p.pid for p in procs],
        )
        with contextlib.suppress(AttributeError, ValueError, OSError):
            sys.stderr.flush()
            faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(procs, timeout=2)  # reaped, those of this process
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(143)


@contextlib.contextmanager
def sigterm_exits(deadline_s: float = EXIT_DEADLINE_S) -> Iterator[None]:
    """While inside, SIGTERM raises ``SystemExit(143)`` in the main thread (128 + SIGTERM, as a
    shell reports a process it ended); a second SIGTERM while the first unwinds is said and
    ignored. Outside the main thread (signals cannot be set there) nothing changes.

    The first SIGTERM also arms a watchdog, disarmed on leaving: a stop that takes more than
    ``deadline_s`` seconds (``EXIT_DEADLINE_S``) is cut short (:class:`_ExitWatchdog`: the threads'
    stacks said, every process this one started killed, exit status 143).

    Python drops an exception raised where it cannot propagate (an ``os.fork`` hook, which runs
    each time a subprocess starts, as Ray does while it starts; a ``__del__``) and reports it to
    ``sys.unraisablehook``: there this exit is raised again at the next moment it can propagate."""
    if not _in_main_thread():
        yield
        return
    stopping, again, in_hook = False, False, False
    watchdog = _ExitWatchdog(deadline_s)

    def send_again() -> None:
        # from another thread, a moment later: the handler runs in the main thread once the hook
        # has returned (run from the hook, what it raises would be dropped again)
        threading.Timer(0.01, os.kill, (os.getpid(), signal.SIGTERM)).start()

    def handler(signum: int, frame: Any) -> None:
        nonlocal stopping, again
        if in_hook:
            send_again()
            return
        if stopping and not again:
            logger.warning("SIGTERM again: still shutting down (engines, tool workers, Ray)")
            return
        if not stopping:
            stopping = True
            logger.warning("SIGTERM: stopping the run (pid %d)", os.getpid())
            watchdog.arm()
        again = False
        raise _SigtermExit(128 + signum)

    outer_hook = sys.unraisablehook

    def dropped(unraisable: Any) -> None:
        nonlocal again, in_hook
        if not isinstance(unraisable.exc_value, _SigtermExit):
            outer_hook(unraisable)
            return
        in_hook, again = True, True
        try:
            send_again()
        finally:
            in_hook = False

    global _handler
    previous = signal.signal(signal.SIGTERM, handler)
    outer, _handler = _handler, handler
    sys.unraisablehook = dropped
    try:
        yield
    finally:
        watchdog.disarm()
        _handler = outer
        sys.unraisablehook = outer_hook
        signal.signal(signal.SIGTERM, previous)


class _SigtermExit(SystemExit):
    """The ``SystemExit`` of :func:`sigterm_exits`'s handler (told apart where Python drops it)."""


_handler: Any = None  # the SIGTERM handler of the innermost sigterm_exits, while inside it


@contextlib.contextmanager
def sigterm_kept() -> Iterator[None]:
    """Around ``ray.init``: Ray does not replace :func:`sigterm_exits`'s handler while it starts,
    so a SIGTERM then ends the run as at any other moment (143, said). ``ray.init`` sets its own
    through ``ray._private.utils.set_sigterm_handler``, made to do nothing while inside; the
    handler is put back on leaving (:func:`reclaim_sigterm`) in case another path set one.
    Outside :func:`sigterm_exits` or the main thread nothing changes."""
    utils = _ray_utils() if _handler is not None and _in_main_thread() else None
    setter = getattr(utils, "set_sigterm_handler", None)
    if setter is None:  # nothing to keep, or a Ray that sets its handler some other way
        try:
            yield
        finally:
            reclaim_sigterm()
        return
    utils.set_sigterm_handler = lambda handler: None
    try:
        yield
    finally:
        utils.set_sigterm_handler = setter
        reclaim_sigterm()


def _ray_utils() -> Any:
    try:
        from ray._private import utils
    except ImportError:
        return None
    return utils


def reclaim_sigterm() -> None:
    """Put :func:`sigterm_exits`'s handler back after ``ray.init`` replaced it with Ray's own
    (which exits too, but again on every further SIGTERM, cutting a shutdown short). Called
    where agentfly starts Ray; does nothing outside :func:`sigterm_exits` or the main thread."""
    if _handler is not None and _in_main_thread() and signal.getsignal(signal.SIGTERM) is not _handler:
        signal.signal(signal.SIGTERM, _handler)
