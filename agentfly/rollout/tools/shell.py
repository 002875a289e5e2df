"""``run_shell_command`` (AgentFly's ``src/agentfly/tools/src/shell/tools.py``): a bash command in
the chain's workspace (:mod:`agentfly.rollout.tools.workspace`), in the sandbox.

Every command runs in a new bash, in the workspace, with the trainer's Python first on
``PATH`` (``python``, ``pytest`` where installed), under ``command_timeout`` (120 s, AgentFly's)
and the workspace's memory and process limits. The answer is the output (stdout, then stderr),
with ``Exit code N`` first when the command failed.

Departures from AgentFly (a command in the task's container, ``/testbed``): the command runs
in the bubblewrap sandbox with no network, so AgentFly's filter of commands (``pip install``
and other heavy or dangerous commands refused unless allow-listed) is not applied; the exit
code is shown.
"""

from __future__ import annotations

from typing import Any

from agentfly.rollout.tools.base import ToolResult
from agentfly.rollout.tools.workspace import program_answer, workspace_tool


@workspace_tool("run_shell_command")
def run_shell_command(cmd: str, resource: Any) -> str | ToolResult:
    """Runs a shell command in the workspace.

    Args:
        cmd: The shell command to run (e.g. "ls -la", "cat file.txt", "pwd"). For multi-line python -c code, use bash ANSI-C quoting so newlines work: python3 -c $'line1\\nline2\\nline3'.
    """
    return program_answer(resource.shell(cmd), "Error: Command timed out.")
