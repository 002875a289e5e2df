"""A chain's workspace: a directory of the task's files that the SWE tools read, edit and run in.

Each chain has its own :class:`Workspace`, the resource the file tools
(:mod:`agentfly.rollout.tools.files`) and ``run_shell_command``
(:mod:`agentfly.rollout.tools.shell`) share (``environment="swe_workspace"``): made when the
chain starts, from its data row's ``repo`` (``{path: text}``; empty without one), and removed
when the chain ends. It lives in a private directory of the trainer's machine
(``<tmp>/agentfly-workspace-*/testbed``, the parent 0700).

Confinement: every path a tool is given is resolved (``..`` and symbolic links followed) and
refused with :class:`PathRefused` unless it lands inside the workspace; an absolute path counts
only under the workspace's own absolute paths (:data:`WORKDIR_MOUNT`, where the sandboxed
programs see it, or its real path). The trainer reads and writes regular files only (a FIFO
never blocks a tool). Programs (``run_python``, ``run_shell_command``) run in the sandbox
(:func:`~agentfly.rollout.execution.sandbox.run_code`, bubblewrap by default) with the workspace
as their working directory and their only writable place besides a private ``/tmp``, under the
settings' wall-clock, memory and process limits. A lock makes the workspace's calls one at a
time: no program runs while a tool checks and then opens a path, so a link it leaves cannot be
swapped in between.

:meth:`Workspace.record` (on the trajectory as ``environments["swe_workspace"]``) holds what
the chain changed: the text of the files it created or changed and the paths it deleted, against
the row's, which the reward (:mod:`agentfly.rollout.rewards.swe_rewards`) applies to a fresh copy
of the row's files before it runs their tests.

Departures from AgentFly (whose tools run ``file_manager.py`` in the task's container, at
``/testbed``): the workspace is a directory of the trainer's machine, at ``/tmp/testbed`` in
the sandbox; undo snapshots are kept in memory, not under ``.agentfly_undo/``; ``grep_search``
runs ``grep -E`` in the sandbox too (AgentFly's falls back to Python's ``re`` without grep); an
absolute path outside the workspace is refused (AgentFly reads it relative to the workspace);
only regular files are listed, searched and recorded (links are not followed).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from agentfly.rollout.execution.sandbox import (
    MAX_PROCESSES,
    WORKDIR_MOUNT,
    SandboxResult,
    run_code,
)
from agentfly.rollout.execution.sandbox_isolation import (
    Isolation,
    check_isolation,
    isolation_problem,
)
from agentfly.rollout.tools.base import Tool, ToolResult, tool
from agentfly.rollout.tools.workspace_files import (
    FileProblem,
    edit_confirmation,
    edit_problem,
    grep_command,
    grep_output,
    read_numbered,
    read_text,
    walk,
    write_text,
)

WORKSPACE_ENV = "swe_workspace"
"""The environment name the SWE tools share one workspace under (``Trajectory.environments``)."""
OPT_IN_KEY = "agent.init_config.tool_config.<tool>.isolation=unsafe_rlimits_only"
MAX_RECORD_CHARS = 4_000_000
"""Text of changed files a record holds at most; past it the record says ``truncated``."""
GREP_TIMEOUT_S = 15.0
SHELL = shutil.which("bash") or "/bin/bash"


class PathRefused(PermissionError):
    """A path outside the workspace (the message names it)."""


@dataclasses.dataclass(frozen=True)
class WorkspaceSettings:
    """Limits of the programs a chain runs in its workspace (``agent.init_config.tool_config.<tool>``
    of any SWE tool: they share one workspace).

    Attributes:
        command_timeout: wall-clock seconds of one ``run_shell_command`` (``run_python``'s own
            ``timeout`` argument is capped at it).
        cpu_seconds: CPU seconds of each process of a program; None: its wall-clock limit, plus one.
        memory_mb: address-space limit of each process.
        max_processes: processes and threads a program may run at once.
        isolation: ``"bwrap"`` (contained; refused where bubblewrap cannot run) or
            ``"unsafe_rlimits_only"`` (limits only, nothing contained).
        max_output_chars: stdout and stderr of a program are each cut to this many characters.
    """

    command_timeout: float = 120.0
    cpu_seconds: float | None = None
    memory_mb: int = 4096
    max_processes: int = MAX_PROCESSES
    isolation: Isolation = "bwrap"
    max_output_chars: int = 20_000

    def __post_init__(self) -> None:
        for name in ("command_timeout", "memory_mb", "max_processes", "max_output_chars"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.cpu_seconds is not None and not self.cpu_seconds > 0:
            raise ValueError(f"cpu_seconds must be positive or null, got {self.cpu_seconds}")
        check_isolation(self.isolation)

    def environment_problem(self) -> str | None:
        """Why programs cannot run with these settings here (bubblewrap cannot), or None."""
        return isolation_problem(self.isolation, opt_in=OPT_IN_KEY)

    def longest_call(self) -> float:
        """The longest a call may take by the settings' own limits (the tools' timeout exceeds it)."""
        return self.command_timeout + 30.0


def repo_of(row: Mapping[str, Any]) -> dict[str, str]:
    """The row's files, ``{relative path: text}`` (none without ``repo``; a path whose text is
    None, as a parquet file's struct gives a path only another row has, is no file).

    Raises:
        ValueError: ``repo`` is not such a mapping.
    """
    repo = row.get("repo") or {}
    if not isinstance(repo, Mapping):
        raise ValueError("a row's 'repo' must map relative file paths to their text")
    files = {k: v for k, v in repo.items() if v is not None}
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        raise ValueError("a row's 'repo' must map relative file paths to their text")
    return files


def exec_program(argv: list[str] | None = None, *, python_script: str | None = None) -> str:
    """The sandbox program that replaces itself with ``argv`` (looked up on PATH), or with the
    trainer's Python running ``python_script``; the trainer's Python is first on PATH."""
    lines = [
        "import os, sys",
        "os.environ['PATH'] = os.path.dirname(sys.executable) + os.pathsep + os.environ['PATH']",
    ]
    if python_script is not None:
        lines.append(f"os.execv(sys.executable, [sys.executable, {python_script!r}])")
    else:
        lines.append(f"os.execvp({argv[0]!r}, {argv!r})")
    return "\n".join(lines) + "\n"


class Workspace:
    """One chain's workspace (see the module docstring); every method holds its lock.

    Args:
        settings: the programs' limits.
    """

    def __init__(self, settings: WorkspaceSettings | None = None) -> None:
        self.settings = settings or WorkspaceSettings()
        self._lock = threading.Lock()
        self._base: Path | None = None
        self._root: Path | None = None
        self._initial: dict[str, str] = {}
        self._undo: dict[str, list[str]] = {}

    # ------------------------------------------------------------------ lifecycle

    def start(self, row: Mapping[str, Any], seed: int | None = None) -> str:
        """A fresh workspace holding the row's files (the previous one, if any, removed)."""
        repo = repo_of(row)
        with self._lock:
            self._remove()
            self._base = Path(os.path.realpath(tempfile.mkdtemp(prefix="agentfly-workspace-")))
            self._root = self._base / "testbed"
            self._root.mkdir()
            self._initial, self._undo = {}, {}
            for rel, text in repo.items():
                target = self._resolve(rel)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text, encoding="utf-8")
                self._initial[self._relative(target)] = text
        return f"The workspace holds {len(repo)} files."

    def close(self) -> None:
        """Remove the workspace; safe to call twice."""
        with self._lock:
            self._remove()

    def _remove(self) -> None:
        if self._base is not None:
            shutil.rmtree(self._base, ignore_errors=True)
        self._base = self._root = None

    @property
    def root(self) -> Path:
        """The workspace's real directory on this machine."""
        if self._root is None:
            raise RuntimeError("the workspace was not started")
        return self._root

    # ------------------------------------------------------------------ paths

    def _resolve(self, path: str) -> Path:
        """The real path ``path`` names inside the workspace.

        Raises:
            PathRefused: it lands outside (``..``, an absolute path elsewhere, a link out).
        """
        root = self.root
        text = str(path)
        if "\0" in text:
            raise PathRefused(f"{path!r} is not a valid path")
        for prefix in (WORKDIR_MOUNT, str(root)):
            if text == prefix or text.startswith(prefix + "/"):
                text = text[len(prefix) :].lstrip("/") or "."
                break
        else:
            if os.path.isabs(text):
                raise PathRefused(f"{path} is outside the workspace ({WORKDIR_MOUNT})")
        full = Path(os.path.realpath(root / text))
        if not full.is_relative_to(root):
            raise PathRefused(f"{path} is outside the workspace ({WORKDIR_MOUNT})")
        return full

    def _relative(self, full: Path) -> str:
        return full.relative_to(self.root).as_posix() if full != self.root else "."

    # ------------------------------------------------------------------ file tools

    # The file tools answer as AgentFly's do: a problem with the file is an "Error: ..." text;
    # a path outside the workspace raises PathRefused.

    def read_file(self, path: str, start_line: int | None = None, end_line: int | None = None) -> str:
        with self._lock:
            full = self._resolve(path)
            try:
                return read_numbered(full, self._relative(full), start_line, end_line)
            except FileProblem as e:
                return f"Error: {e}"

    def create_file(self, path: str, content: str = "") -> str:
        with self._lock:
            full = self._resolve(path)
            rel = self._relative(full)
            if os.path.lexists(full):
                return f"Error: {rel} already exists. Use edit_file."
            try:
                full.parent.mkdir(parents=True, exist_ok=True)
                write_text(full, content)
            except (FileProblem, OSError) as e:
                return f"Error: {e}"
            return f"Created {rel} ({len(content)} bytes)"

    def edit_file(self, path: str, search_block: str, replace_block: str) -> str:
        with self._lock:
            full = self._resolve(path)
            rel = self._relative(full)
            try:
                content = read_text(full)
                problem = edit_problem(content, search_block)
                if problem:
                    return problem
                new_content = content.replace(search_block, replace_block, 1)
                write_text(full, new_content)
            except FileProblem as e:
                return f"Error: {e}"
            self._undo.setdefault(rel, []).append(content)
            return edit_confirmation(rel, new_content, replace_block)

    def undo_edit(self, path: str) -> str:
        with self._lock:
            full = self._resolve(path)
            history = self._undo.get(self._relative(full))
            if not history:
                return "Error: No edit history for this file."
            try:
                write_text(full, history[-1])
            except FileProblem as e:
                return f"Error: {e}"
            history.pop()
            n = len(history)
            return f"Undo successful. ({n} earlier version{'s' if n != 1 else ''} in history)"

    def list_files(self, path: str = ".", max_depth: int = 3) -> str:
        with self._lock:
            full = self._resolve(path)
            found = [self._relative(p) for p in walk(full, max_depth)]
            return "\n".join(found) if found else "(empty)"

    def grep_search(self, pattern: str, path: str = ".", include: str = "") -> str:
        """``grep -rn -E`` in the sandbox (a pattern cannot hang the trainer)."""
        with self._lock:
            rel = self._relative(self._resolve(path))
            command = grep_command(pattern, rel, include)
            limit = min(GREP_TIMEOUT_S, self.settings.command_timeout)
            return grep_output(self._run(exec_program(command), limit))

    # ------------------------------------------------------------------ programs

    def python(self, path: str, timeout: float | None = None) -> SandboxResult | str:
        """Run the script ``path`` in the sandbox (``timeout`` capped at ``command_timeout``)."""
        with self._lock:
            full = self._resolve(path)
            if not full.is_file():
                return f"Error: Not a file or missing: {self._relative(full)}"
            limit = min(timeout or self.settings.command_timeout, self.settings.command_timeout)
            script = f"./{self._relative(full)}"  # never read as an option ("-c")
            return self._run(exec_program(python_script=script), limit)

    def shell(self, command: str) -> SandboxResult:
        """Run ``command`` with bash in the sandbox, in the workspace."""
        with self._lock:
            return self._run(exec_program([SHELL, "-c", command]), self.settings.command_timeout)

    def _run(self, program: str, timeout: float) -> SandboxResult:
        s = self.settings
        return run_code(
            program, timeout=timeout, memory_mb=s.memory_mb, max_output_chars=s.max_output_chars,
            isolation=s.isolation, cpu_seconds=s.cpu_seconds, max_processes=s.max_processes,
            workdir=str(self.root),
        )

    # ------------------------------------------------------------------ the record

    def record(self) -> dict[str, Any]:
        """What the chain changed against the row's files: ``changed`` (``{path: text}`` of the
        files it created or changed), ``deleted`` (paths), ``unreadable`` (files that are not
        UTF-8 text), ``truncated`` (the changes passed :data:`MAX_RECORD_CHARS` and were cut);
        ``env``, ``return`` (0.0) and ``steps`` (none) as every environment's record has them."""
        with self._lock:
            changed: dict[str, str] = {}
            unreadable: list[str] = []
            seen: set[str] = set()
            size, truncated = 0, False
            if self._root is not None:
                for full in walk(self.root, everything=True):
                    rel = self._relative(full)
                    seen.add(rel)
                    if truncated:  # the rest only counts for what was deleted
                        continue
                    try:
                        text = read_text(full)
                    except FileProblem:
                        unreadable.append(rel)
                        continue
                    if self._initial.get(rel) != text:
                        size += len(text)
                        truncated |= size > MAX_RECORD_CHARS
                        if not truncated:
                            changed[rel] = text
            deleted = sorted(set(self._initial) - seen)
        return {
            "env": WORKSPACE_ENV, "changed": changed, "deleted": deleted,
            "unreadable": unreadable, "truncated": truncated, "return": 0.0, "steps": [],
        }


def new_workspace(settings: WorkspaceSettings) -> Workspace:
    """An empty workspace with the run's limits (the SWE tools' resource factory)."""
    return Workspace(settings)


@contextlib.contextmanager
def workspace_of(repo: Mapping[str, str], settings: WorkspaceSettings) -> Iterator[Workspace]:
    """A workspace holding ``repo``, removed when the block ends."""
    workspace = Workspace(settings)
    try:
        workspace.start({"repo": dict(repo)})
        yield workspace
    finally:
        workspace.close()


# ---------------------------------------------------------------------- the tools' shared parts

PATH_REFUSED = "path_refused"
"""The error kind of a call given a path outside the workspace (the model's; not counted as the
infrastructure's failure)."""
COMMAND_TIMEOUT = "command_timeout"
"""The error kind of a program stopped at ``command_timeout``: a verdict on the model's command,
apart from ``timeout`` (the harness's backstop on the tool call)."""
TOOL_TIMEOUT_S = 600.0
"""The backstop on one call of a SWE tool: calls of a chain wait for each other (the lock)."""


def workspace_tool(name: str) -> Callable[[Callable[..., Any]], Tool]:
    """Register a tool acting on the chain's workspace (its ``resource``)."""
    return tool(
        name=name, stateful=True, resource_factory=new_workspace, settings=WorkspaceSettings,
        timeout=TOOL_TIMEOUT_S, max_output_chars=10_000, max_resources=64,
        environment=WORKSPACE_ENV,
    )


def answer(call: Callable[[], str]) -> str | ToolResult:
    """``call()``'s text, or a ``path_refused`` failure saying which path was refused."""
    try:
        return call()
    except PathRefused as e:
        return ToolResult.failure(PATH_REFUSED, f"Access denied: {e}.")


def program_answer(result: SandboxResult | str, timed_out_text: str) -> str | ToolResult:
    """A program's output (stdout, then stderr; ``(no output)``), ``Exit code N`` first when it
    failed; a ``command_timeout`` failure saying ``timed_out_text`` when it ran out of time."""
    if isinstance(result, str):  # the workspace's own answer (no such script)
        return result
    if result.timed_out:
        return ToolResult.failure(COMMAND_TIMEOUT, timed_out_text)
    parts = [text.rstrip() for text in (result.stdout, result.stderr) if text.strip()]
    body = "\n".join(parts) if parts else "(no output)"
    if result.truncated:
        body += "\n[output truncated]"
    return f"Exit code {result.returncode}\n{body}" if result.returncode != 0 else body
