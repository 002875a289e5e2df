"""The child side of :class:`agentfly.rollout.execution.workers.WorkerPool`: one worker process.

Run as ``python -m agentfly.rollout.execution.worker_main PARENT_PID MEMORY_MB MAX_REPLY_BYTES IMPORTS``,
``IMPORTS`` a JSON object ``{"plugins": [...], "preload": [...]}``: the run's plugins, and
modules worth importing before the first call (a reward's heavy dependency).
Its own import path is the standard library and cloudpickle; what a job needs (agentfly's tool
and reward helpers, the user's modules) is imported when the job is unpickled.

Protocol: frames of an 8-byte big-endian length and a cloudpickle payload, over the process's
original stdin (requests) and stdout (replies). File descriptors 0 and 1 are then pointed at
``/dev/null`` and stderr, so user code that prints cannot corrupt a frame.

- start: the worker imports the plugins and the preloaded modules, sets its address-space limit (``RLIMIT_AS``), then sends
  ``("ready", pid)``, or ``("failed", message)`` when something of that went wrong;
- request: ``(plugin_files, payload)``; the files (plugins the parent has loaded since) are
  imported first, then ``payload`` unpickles to ``(fn, args, kwargs)``;
- reply: ``("ok", value)`` or ``("error", exception_bytes, type_name, message)``. A reply over
  ``MAX_REPLY_BYTES`` is replaced by a :class:`ReplyTooLarge` error here, so it never crosses
  the pipe.

The worker kills its whole process group (itself and whatever its calls started) as soon as its
parent is gone, however the parent ended: when its request pipe closes, or when a watchdog thread
sees its parent process change.
"""

from __future__ import annotations

import importlib
import json
import os
import pickle
import resource
import signal
import struct
import sys
import threading
import time
import traceback
from typing import Any

import cloudpickle

HEADER = struct.Struct("!Q")
WATCH_INTERVAL_S = 0.2
MAX_MESSAGE_CHARS = 10_000  # of an exception's message in a reply


class RemoteError(Exception):
    """An exception raised in a worker that cannot be sent back as itself."""

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(message)
        self.type_name = type_name
        self.message = message

    def __reduce__(self) -> tuple[Any, ...]:
        return (RemoteError, (self.type_name, self.message))


class ReplyTooLarge(Exception):
    """A call's result pickles to more bytes than a reply may carry."""

    def __init__(self, size: int, cap: int) -> None:
        super().__init__(f"its result is {size} bytes pickled, over the {cap}-byte reply cap")
        self.size = size
        self.cap = cap

    def __reduce__(self) -> tuple[Any, ...]:
        return (ReplyTooLarge, (self.size, self.cap))


def read_exact(fd: int, size: int) -> bytes | None:
    """``size`` bytes from ``fd``; None at end of file."""
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_frame(fd: int) -> bytes | None:
    header = read_exact(fd, HEADER.size)
    if header is None:
        return None
    return read_exact(fd, HEADER.unpack(header)[0])


def write_frame(fd: int, payload: bytes) -> None:
    view = memoryview(HEADER.pack(len(payload)) + payload)
    while view:
        view = view[os.write(fd, view) :]


def _end_group() -> None:
    """Kill this worker and everything its calls started (its process group)."""
    try:
        os.killpg(0, signal.SIGKILL)
    finally:
        os._exit(1)


def _watch_parent(parent: int) -> None:
    while True:
        time.sleep(WATCH_INTERVAL_S)
        if os.getppid() != parent:
            _end_group()


def _import_plugins(specs: list[str], loaded: set[str]) -> None:
    new = [s for s in specs if s not in loaded]
    if not new:
        return
    from agentfly.core.plugins import load_plugins

    load_plugins(new)
    loaded.update(new)


def _error_reply(exc: BaseException) -> tuple[Any, ...]:
    try:
        data = cloudpickle.dumps(exc)
        pickle.loads(data)  # an exception whose __init__ takes other arguments fails here
    except BaseException:
        data = cloudpickle.dumps(RemoteError(type(exc).__name__, str(exc)))
    return ("error", data, type(exc).__name__, str(exc)[:MAX_MESSAGE_CHARS])


def _run(frame: bytes, cap: int, loaded: set[str]) -> bytes:
    try:
        plugin_files, payload = pickle.loads(frame)
        _import_plugins(plugin_files, loaded)
        fn, args, kwargs = cloudpickle.loads(payload)
        reply: tuple[Any, ...] = ("ok", fn(*args, **kwargs))
    except BaseException as exc:  # SystemExit and KeyboardInterrupt of user code too
        reply = _error_reply(exc)
    try:
        data = cloudpickle.dumps(reply)
    except BaseException as exc:
        data = cloudpickle.dumps(_error_reply(RemoteError(
            type(exc).__name__, f"the result cannot be sent back: {type(exc).__name__}: {exc}"
        )))
    if len(data) > cap:
        data = cloudpickle.dumps(_error_reply(ReplyTooLarge(len(data), cap)))
    return data


def main(argv: list[str]) -> int:
    parent, memory_mb, cap = int(argv[1]), int(argv[2]), int(argv[3])
    return run_worker(parent, memory_mb, cap, json.loads(argv[4]), set())


def run_worker(
    parent: int, memory_mb: int, cap: int, imports: dict[str, list[str]], loaded: set[str]
) -> int:
    """The worker's life on file descriptors 0 (requests) and 1 (replies): imports, limits,
    ``ready``, then one call per request until the pipe closes. ``loaded``: the plugins already
    imported (a worker forked by :mod:`~agentfly.rollout.execution.forkserver_main`)."""
    requests, replies = os.dup(0), os.dup(1)  # not inherited by what user code starts
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(2, 1)
    os.close(null)
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    try:
        if os.getppid() != parent:
            return 1
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        _import_plugins(imports["plugins"], loaded)
        for module in imports["preload"]:
            importlib.import_module(module)
        if memory_mb > 0:
            limit = memory_mb * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except BaseException as exc:
        message = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"
        write_frame(replies, cloudpickle.dumps(("failed", message)))
        return 1
    write_frame(replies, cloudpickle.dumps(("ready", os.getpid())))
    while True:
        frame = read_frame(requests)
        if frame is None:  # the pool closed the pipe, or its process is gone
            _end_group()
        write_frame(replies, _run(frame, cap, loaded))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
