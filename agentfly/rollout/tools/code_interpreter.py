"""``code_interpreter`` (alias ``python_executor``): run Python in the chain's sandboxed session.

Each chain gets its own ``PythonSession`` (see ``agentfly.rollout.execution.sandbox``) from the resource
pool, so variables persist across the chain's turns and never leak into another chain. The
session's own per-cell limit (:class:`SessionSettings`, ``cell_timeout``: 10 s by default) stops
a runaway cell and restarts the interpreter; the tool's outer timeout is only a backstop.

The session is contained by bubblewrap (``isolation="bwrap"``, the default; see
``agentfly.rollout.execution.sandbox_isolation``): read-only root, private ``/tmp``, no network, no parent
environment, an unprivileged uid, process, CPU, memory and wall limits, every process killed when
a cell times out or the chain ends. A run that uses this tool where bubblewrap cannot run is
refused when its config is composed (:meth:`SessionSettings.environment_problem`), unless it opts
in to ``isolation="unsafe_rlimits_only"`` (limits only; a warning names what is not contained).
"""

from __future__ import annotations

from dataclasses import dataclass

from agentfly.rollout.execution.sandbox import MAX_PROCESSES, CellResult, PythonSession
from agentfly.rollout.execution.sandbox_isolation import (
    Isolation,
    check_isolation,
    isolation_problem,
)
from agentfly.rollout.tools.base import ToolResult, tool

CELL_TIMEOUT = "cell_timeout"
"""The error kind of a cell stopped at the session's own limit: a verdict on the model's code,
apart from ``timeout`` (the harness's deadline on the tool itself; see
:mod:`agentfly.rollout.failures`)."""


@dataclass(frozen=True)
class SessionSettings:
    """Limits of each chain's Python session (``agent.init_config.tool_config.code_interpreter``).

    Attributes:
        cell_timeout: wall-clock (and CPU) seconds per cell before the interpreter is restarted.
        memory_mb: address-space limit of the interpreter process.
        isolation: ``"bwrap"`` (contained; refused where bubblewrap cannot run) or
            ``"unsafe_rlimits_only"`` (the explicit opt-in: limits only, nothing contained).
        start_timeout: seconds to wait for a new interpreter to come up.
        max_processes: processes and threads a session may run at once, its interpreter
            included (a fork bomb stops there).
    """

    cell_timeout: float = 10.0
    memory_mb: int = 1024
    isolation: Isolation = "bwrap"
    start_timeout: float = 30.0
    max_processes: int = MAX_PROCESSES

    def __post_init__(self) -> None:
        for name in ("cell_timeout", "memory_mb", "start_timeout", "max_processes"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        check_isolation(self.isolation)

    def environment_problem(self) -> str | None:
        """Why sessions with these settings cannot run on this machine (bubblewrap missing or
        unable to make namespaces for ``isolation="bwrap"``), or ``None``."""
        return isolation_problem(self.isolation)


def new_session(settings: SessionSettings) -> PythonSession:
    """A fresh sandboxed session with the run's limits (the tool's resource factory)."""
    return PythonSession(
        timeout=settings.cell_timeout,
        memory_mb=settings.memory_mb,
        isolation=settings.isolation,
        start_timeout=settings.start_timeout,
        max_processes=settings.max_processes,
    )


def format_cell(result: CellResult) -> str:
    """The observation for one cell: its output and error output, or ``(no output)``."""
    parts = []
    if result.restarted and not result.timed_out and result.error != "WorkerDied":
        parts.append("[the interpreter had stopped and was restarted; earlier variables are lost]")
    if result.stdout.strip():
        parts.append(result.stdout.rstrip("\n"))
    if result.stderr.strip():
        parts.append(result.stderr.rstrip("\n"))
    if result.truncated:
        parts.append("[output truncated]")
    return "\n".join(parts) if parts else "(no output)"


@tool(
    name="code_interpreter",
    aliases=("python_executor",),
    stateful=True,
    resource_factory=new_session,
    timeout=120.0,
    max_output_chars=10_000,
    settings=SessionSettings,
)
def code_interpreter(code: str, resource: PythonSession) -> str | ToolResult:
    """Run Python code in a persistent interpreter and return what it prints.

    Variables, functions and imports persist between calls in the same conversation. The value
    of a final bare expression is printed. There is no network and no access to local files.

    Args:
        code: the Python code to run.
    """
    result = resource.run(code)
    observation = format_cell(result)
    if result.timed_out:
        return ToolResult.failure(CELL_TIMEOUT, observation)
    return observation
