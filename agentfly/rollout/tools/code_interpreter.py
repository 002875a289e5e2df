"""``code_interpreter`` (alias ``python_executor``): run Python in the chain's sandboxed session.

Each chain gets its own ``PythonSession`` (see ``agentfly.rollout.sandbox``) from the resource
pool, so variables persist across the chain's turns and never leak into another chain. The
session's own per-cell limit (10 s by default; set it with a pool factory such as
``functools.partial(PythonSession, timeout=5)``) stops a runaway cell and restarts the
interpreter; the tool's outer timeout is only a backstop.
"""

from __future__ import annotations

from agentfly.rollout.sandbox import CellResult, PythonSession
from agentfly.rollout.tools.base import TIMEOUT, ToolResult, tool


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
    resource_factory=PythonSession,
    timeout=120.0,
    max_output_chars=10_000,
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
        return ToolResult.failure(TIMEOUT, observation)
    return observation
