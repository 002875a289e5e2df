"""The SWE tools on a chain's workspace: what each answers (AgentFly's texts, written out here),
that no path and no program gets out of the workspace, and what the workspace records.

The escape attempts of whole programs (writes elsewhere, /etc/shadow, signals, fork bombs,
detached children, CPU and memory) run through ``run_python`` and ``run_shell_command`` in
``test_sandbox_escape.py``; here, the paths the file tools are given."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from agentfly.rollout.execution import sandbox_isolation
from agentfly.rollout.tools import get_tool
from agentfly.rollout.tools.bind import ToolConfigError, bind_tools
from agentfly.rollout.tools.workspace import (
    COMMAND_TIMEOUT,
    OPT_IN_KEY,
    PATH_REFUSED,
    WORKDIR_MOUNT,
    Workspace,
    WorkspaceSettings,
)

needs_bwrap = pytest.mark.needs_bwrap  # skipped, saying why, where bubblewrap cannot run
CORE = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"
REPO = {
    "README.md": "# calc\n",
    "calc/__init__.py": "",
    "calc/core.py": CORE,
    "tests/test_core.py": "from calc.core import add\nassert add(1, 2) == 3\n",
}
TOOLS = ("read_file", "edit_file", "create_file", "list_files", "grep_search", "run_python", "undo_edit")


def call(name, workspace, **arguments):
    return get_tool(name)(resource=workspace, **arguments)


@pytest.fixture
def workspace():
    ws = Workspace(WorkspaceSettings(command_timeout=10))
    ws.start({"repo": REPO})
    yield ws
    ws.close()


def test_each_chain_gets_its_own_private_copy_of_the_rows_files(workspace):
    other = Workspace()
    other.start({"repo": REPO})
    try:
        assert workspace.root != other.root and workspace.root.name == "testbed"
        assert stat.S_IMODE(os.stat(workspace.root.parent).st_mode) == 0o700
        call("edit_file", workspace, path="calc/core.py", search_block="a - b\n\n\ndef", replace_block="a + b\n\n\ndef")
        assert (other.root / "calc/core.py").read_text() == CORE  # the other chain's is untouched
    finally:
        base = other.root.parent
        other.close()
    assert not base.exists()  # removed with the chain
    with pytest.raises(ValueError, match="relative file paths"):
        Workspace().start({"repo": {"a.py": 1}})


def test_read_file_numbers_lines_and_shows_a_range(workspace):
    assert call("read_file", workspace, path="calc/core.py", start_line=2, end_line=3) == (
        "[File: calc/core.py (6 lines)] [Showing 2-3]\n     2 |     return a - b\n     3 | \n")
    assert call("read_file", workspace, path="README.md") == "[File: README.md (1 lines)]\n     1 | # calc\n"
    assert call("read_file", workspace, path=f"{WORKDIR_MOUNT}/README.md").startswith("[File: README.md")
    assert call("read_file", workspace, path="missing.py") == "Error: No such file: missing.py"
    assert call("read_file", workspace, path="calc") == "Error: calc is a directory"


def test_edit_file_replaces_one_exact_block_and_undo_edit_takes_it_back(workspace):
    path = "calc/core.py"
    assert call("edit_file", workspace, path=path, search_block="a - b", replace_block="a + b") == (
        "Error: search_block matches 2 locations.\nInclude more surrounding context to make the match unique.")
    assert call("edit_file", workspace, path=path, search_block="a * b", replace_block="x").startswith(
        "Error: search_block not found in file.")
    done = call("edit_file", workspace, path=path, search_block="add(a, b):\n    return a - b",
                replace_block="add(a, b):\n    return a + b")
    assert done == ("File updated: calc/core.py\n[Lines 1-5]\n     1 | def add(a, b):\n"
                    "     2 |     return a + b\n     3 | \n     4 | \n     5 | def sub(a, b):\n")
    call("edit_file", workspace, path=path, search_block="def sub", replace_block="def minus")
    assert call("undo_edit", workspace, path=path) == "Undo successful. (1 earlier version in history)"
    assert (workspace.root / path).read_text() == CORE.replace("a - b", "a + b", 1)
    assert call("undo_edit", workspace, path=path) == "Undo successful. (0 earlier versions in history)"
    assert (workspace.root / path).read_text() == CORE
    assert call("undo_edit", workspace, path=path) == "Error: No edit history for this file."


def test_create_file_makes_directories_and_never_overwrites(workspace):
    assert call("create_file", workspace, path="calc/extra/new.py", content="x = 1\n") == "Created calc/extra/new.py (6 bytes)"
    assert (workspace.root / "calc/extra/new.py").read_text() == "x = 1\n"
    assert call("create_file", workspace, path="README.md") == "Error: README.md already exists. Use edit_file."
    assert call("undo_edit", workspace, path="calc/extra/new.py") == "Error: No edit history for this file."


def test_list_files_skips_hidden_build_and_binary_files_and_stops_at_max_depth(workspace):
    for rel in (".git/config", "calc/__pycache__/core.pyc", "logo.png", "a/b/c/deep.py"):
        (workspace.root / rel).parent.mkdir(parents=True, exist_ok=True)
        (workspace.root / rel).write_text("x")
    assert call("list_files", workspace).splitlines() == [
        "README.md", "calc/__init__.py", "calc/core.py", "tests/test_core.py"]
    assert "a/b/c/deep.py" in call("list_files", workspace, max_depth=4)
    assert call("list_files", workspace, path="calc") == "calc/__init__.py\ncalc/core.py"
    assert call("list_files", workspace, path="nowhere") == "(empty)"


@needs_bwrap
def test_grep_search_gives_grep_lines_filters_and_says_what_is_wrong(workspace):
    assert sorted(call("grep_search", workspace, pattern=r"return a [-+] b").splitlines()) == [
        "calc/core.py:2:    return a - b", "calc/core.py:6:    return a - b"]
    assert call("grep_search", workspace, pattern="add", include="test_*.py") == (
        "tests/test_core.py:1:from calc.core import add\ntests/test_core.py:2:assert add(1, 2) == 3")
    assert call("grep_search", workspace, pattern="calc", path="calc") == "No matches found."
    assert call("grep_search", workspace, pattern="a(").startswith("Error: grep: Unmatched (")


@needs_bwrap
def test_run_python_and_run_shell_command_run_in_the_workspace_with_the_exit_code(workspace):
    call("create_file", workspace, path="show.py", content="import os, sys\nprint(os.getcwd())\nsys.exit(3)\n")
    assert call("run_python", workspace, path="show.py") == f"Exit code 3\n{WORKDIR_MOUNT}"
    assert call("run_python", workspace, path="tests/test_core.py").startswith("Exit code 1\n")
    assert call("run_python", workspace, path="nothing.py") == "Error: Not a file or missing: nothing.py"
    shell = call("run_shell_command", workspace, cmd="pwd && echo made > made.txt && python -c 'print(1)'")
    assert shell == f"{WORKDIR_MOUNT}\n1" and (workspace.root / "made.txt").read_text() == "made\n"
    assert call("run_shell_command", workspace, cmd="echo oops >&2; false") == "Exit code 1\noops"
    assert call("run_shell_command", workspace, cmd="true") == "(no output)"


@needs_bwrap
def test_a_program_past_its_time_is_stopped_as_the_models_timeout():
    ws = Workspace(WorkspaceSettings(command_timeout=1))
    ws.start({"repo": {"spin.py": "while True:\n    pass\n"}})
    try:
        shell = call("run_shell_command", ws, cmd="sleep 30")
        assert (shell.ok, shell.error, shell.observation) == (False, COMMAND_TIMEOUT, "Error: Command timed out.")
        script = call("run_python", ws, path="spin.py", timeout=60)  # capped at command_timeout
        assert script.error == COMMAND_TIMEOUT
        assert script.observation == "Error: Python execution timed out after 60 seconds."
    finally:
        ws.close()


ESCAPES = ["../outside.txt", "calc/../../outside.txt", "/etc/passwd", "/tmp/outside.txt",
           "link_out/passwd", "file_link", "calc/../link_out"]


@pytest.mark.parametrize("path", ESCAPES)
@pytest.mark.parametrize("tool", TOOLS)
def test_no_file_tool_reaches_a_path_outside_the_workspace(workspace, tool, path):
    os.symlink("/etc", workspace.root / "link_out")  # links out, as a program could leave them
    os.symlink("/etc/hostname", workspace.root / "file_link")
    outside = workspace.root.parent / "outside.txt"
    arguments = {"path": path}
    if tool == "edit_file":
        arguments.update(search_block="root", replace_block="x")
    if tool == "grep_search":
        arguments = {"pattern": "root", "path": path}
    before = Path("/etc/hostname").read_text()
    result = call(tool, workspace, **arguments)
    assert getattr(result, "error", None) == PATH_REFUSED, f"{tool}({path!r}) answered {result!r}"
    assert not result.ok and result.observation.startswith("Access denied: ")
    assert "outside the workspace" in result.observation
    assert not outside.exists() and Path("/etc/hostname").read_text() == before


def test_paths_that_stay_inside_are_read(workspace):
    os.symlink("calc/core.py", workspace.root / "inner_link")
    for path in ("calc/../README.md", f"{WORKDIR_MOUNT}/calc/../README.md", f"{workspace.root}/README.md"):
        assert call("read_file", workspace, path=path).startswith("[File: README.md"), path
    assert call("read_file", workspace, path="inner_link").startswith("[File: calc/core.py")


@needs_bwrap
def test_a_fifo_or_a_link_a_program_leaves_blocks_nothing_and_is_not_recorded(workspace):
    call("run_shell_command", workspace, cmd="mkfifo pipe && ln -s /etc/hostname host && rm README.md && echo y > new.txt")
    assert call("read_file", workspace, path="host").error == PATH_REFUSED
    assert call("read_file", workspace, path="pipe") == "Error: pipe is not a regular file"
    assert call("edit_file", workspace, path="pipe", search_block="a", replace_block="b") == "Error: pipe is not a regular file"
    call("edit_file", workspace, path="calc/core.py", search_block="def sub", replace_block="def minus")
    record = workspace.record()
    assert record["changed"] == {"calc/core.py": CORE.replace("def sub", "def minus"), "new.txt": "y\n"}
    assert record["deleted"] == ["README.md"] and not record["truncated"]
    assert (record["env"], record["return"], record["steps"]) == ("swe_workspace", 0.0, [])


def test_without_bwrap_the_tools_are_refused_when_bound_naming_the_opt_in(monkeypatch):
    monkeypatch.setattr(sandbox_isolation, "bwrap_problem", lambda: "bwrap (bubblewrap) is not on PATH")
    with pytest.raises(ToolConfigError) as info:
        bind_tools(["read_file", "run_shell_command"], {})
    message = "\n".join(info.value.problems)
    assert "bwrap (bubblewrap) is not on PATH" in message and OPT_IN_KEY in message
    bind_tools(["run_shell_command"], {"run_shell_command": {"isolation": "unsafe_rlimits_only"}})
