"""AgentFly's file tools on the chain's workspace (:mod:`agentfly.rollout.tools.workspace`):
``create_file``, ``read_file``, ``edit_file``, ``list_files``, ``grep_search``, ``run_python``
and ``undo_edit``, with the names, arguments, descriptions and answers of AgentFly's
(``src/agentfly/tools/src/file/tools.py`` and ``file_manager.py``).

A path outside the workspace is refused (error kind ``path_refused``); a script that runs past
its time is stopped (``command_timeout``). ``undo_edit`` undoes the last ``edit_file`` of a
file (creating a file is no edit, as in AgentFly).
"""

from __future__ import annotations

from typing import Any

from agentfly.rollout.tools.base import ToolResult
from agentfly.rollout.tools.workspace import answer, program_answer, workspace_tool


@workspace_tool("read_file")
def read_file(
    path: str, resource: Any, start_line: int | None = None, end_line: int | None = None
) -> str | ToolResult:
    """Reads a file from the workspace with line numbers.

    Args:
        path: The relative path to the file (under the workspace).
        start_line: Start line number to read from.
        end_line: End line number to read to.
    """
    return answer(lambda: resource.read_file(path, start_line, end_line))


@workspace_tool("edit_file")
def edit_file(path: str, search_block: str, replace_block: str, resource: Any) -> str | ToolResult:
    """Surgically replaces a block of text in a file. Only replaces the first occurrence of search_block.

    Args:
        path: Path to file.
        search_block: Exact text to find.
        replace_block: Text to insert.
    """
    return answer(lambda: resource.edit_file(path, search_block, replace_block))


@workspace_tool("list_files")
def list_files(resource: Any, path: str = ".", max_depth: int = 3) -> str | ToolResult:
    """Lists all files recursively in the workspace.

    Args:
        path: Directory to start from (defaults to root).
        max_depth: Maximum depth to recurse into subdirectories.
    """
    return answer(lambda: resource.list_files(path, max_depth))


@workspace_tool("grep_search")
def grep_search(pattern: str, resource: Any, path: str = ".", include: str = "") -> str | ToolResult:
    """Search for a regex pattern across all files in a directory.

    Args:
        pattern: The regex/string to search for.
        path: Directory to search in.
        include: Glob filter, e.g. "*.py" for Python files only.
    """
    return answer(lambda: resource.grep_search(pattern, path, include))


@workspace_tool("create_file")
def create_file(path: str, resource: Any, content: str = "") -> str | ToolResult:
    """Create a new file under the workspace. Fails if the path already exists.

    Args:
        path: Relative path for the new file.
        content: Initial file body (default empty).
    """
    return answer(lambda: resource.create_file(path, content))


@workspace_tool("run_python")
def run_python(path: str, resource: Any, timeout: int = 60) -> str | ToolResult:
    """Run Python only: executes a script file under the workspace (python3 path; cwd is workspace root).

    Args:
        path: Relative path to a .py file inside the workspace.
        timeout: Max seconds for the subprocess (default 60).
    """
    return answer(lambda: program_answer(
        resource.python(path, timeout),
        f"Error: Python execution timed out after {timeout} seconds.",
    ))


@workspace_tool("undo_edit")
def undo_edit(path: str, resource: Any) -> str | ToolResult:
    """Reverts the last modification made to a specific file.

    Args:
        path: The path of the file to revert.
    """
    return answer(lambda: resource.undo_edit(path))
