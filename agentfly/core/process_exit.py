"""How the ``agentfly`` command's process ends: within a deadline, whatever the machine's load.

When the command returns or raises, the run has stopped what it started (engines, tool workers,
Ray: :mod:`agentfly.core.shutdown`). What Python does next has no deadline: it joins the threads
still running, runs the ``atexit`` hooks (one that waits on a lock or a peer waits for ever),
then tears every module down, whose garbage collections over torch's, Lightning's and Ray's
objects took 9-10 s of a 14 s exit after SIGTERM on a loaded two-core machine, and grow with the
load. :func:`run_and_exit` joins the threads and runs the hooks in the main thread as Python
would, within ``EXIT_HOOKS_TIMEOUT_S`` in all (past it, it says what was left and goes on), then
flushes the standard streams and ends the process with ``os._exit``: nothing is torn down.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import sys
import threading
import traceback
from collections.abc import Callable
from typing import NoReturn

logger = logging.getLogger(__name__)

EXIT_HOOKS_TIMEOUT_S = 10.0  # the threads still running and the atexit hooks, together


def run_and_exit(
    main: Callable[[], int | None], timeout_s: float = EXIT_HOOKS_TIMEOUT_S
) -> NoReturn:
    """Run ``main`` and end the process with its status, as Python would: ``SystemExit``'s code
    (``None`` 0, a message printed and 1), 1 with the traceback for an exception, 130 for
    ``KeyboardInterrupt``; then :func:`end`."""
    try:
        code = _status(main())
    except SystemExit as exc:
        code = _status(exc.code)
    except KeyboardInterrupt:
        traceback.print_exc()
        code = 130
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    end(code, timeout_s)


def _status(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def end(code: int, timeout_s: float = EXIT_HOOKS_TIMEOUT_S) -> NoReturn:
    """Join the threads still running and run the ``atexit`` hooks, within ``timeout_s``; then
    flush the standard streams and ``os._exit(code)``. A helper thread ends the process at the
    deadline if a thread or a hook has not ended by then, saying which."""
    finished = threading.Event()
    waiting = ["the threads still running"]  # what the main thread waits on now

    def cut_short() -> None:
        if finished.wait(timeout_s):
            return
        if waiting[0] != "the atexit hooks":
            waiting[0] = ", ".join(_non_daemon()) or waiting[0]
        logger.warning(
            "the process's exit did not finish within %g s (waiting on %s): exiting without it",
            timeout_s,
            waiting[0],
        )
        _exit(code)

    threading.Thread(target=cut_short, name="agentfly-exit-deadline", daemon=True).start()
    # what the interpreter runs at exit, in its order: threading's exit hooks (executors tell
    # their threads to stop) and a join of every non-daemon thread, then the atexit hooks
    threading._shutdown()  # type: ignore[attr-defined]
    waiting[0] = "the atexit hooks"
    atexit._run_exitfuncs()
    finished.set()
    _exit(code)


def _non_daemon() -> list[str]:
    """The threads Python waits for at exit that are still running (thread ``name``s)."""
    main = threading.main_thread()
    return [
        t.name for t in threading.enumerate() if t is not main and not t.daemon and t.is_alive()
    ]


def _exit(code: int) -> NoReturn:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
