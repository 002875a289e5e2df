"""What a call to a worker process can fail with, besides the call's own exception."""

from __future__ import annotations

from agentfly.rollout.execution.worker_main import RemoteError


class WorkerTimeout(TimeoutError):
    """A call ran past its deadline (counted from when a worker took it); its worker was killed."""

    @classmethod
    def of(cls, label: str, timeout: float) -> WorkerTimeout:
        return cls(f"{label} did not finish within {timeout:g} s of starting; its worker was killed")


class WorkerQueueTimeout(RuntimeError):
    """A call waited past the pool's ``queue_timeout`` for a worker and never ran: the pool is
    too small for the calls in flight (not a verdict on the call)."""

    @classmethod
    def of(cls, label: str, waited: float, running: int, num_workers: int) -> WorkerQueueTimeout:
        return cls(
            f"{label} waited {waited:g} s for a worker process and never started ({running} "
            f"calls were running, num_workers={num_workers}): the pool is too small for the "
            "calls in flight; raise agent.run_config.workers.num_workers (or "
            "workers.queue_timeout)"
        )


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
