"""What the SWE file tools do to a workspace's files, on paths the workspace already confined
(:meth:`agentfly.rollout.tools.workspace.Workspace._resolve`), with AgentFly's outputs
(``src/agentfly/tools/src/file/file_manager.py``): numbered lines, edits of one exact block,
listings that skip hidden, build and binary files, ``grep -rn`` lines.

Only regular files are read or written, without following a link (``O_NOFOLLOW``) and without
blocking on a FIFO (``O_NONBLOCK``); a file larger than :data:`MAX_FILE_BYTES` is not read.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

from agentfly.rollout.execution.sandbox import SandboxResult

MAX_FILE_BYTES = 8 * 1024 * 1024
MAX_GREP_RESULTS = 1000
SKIP_DIRS = frozenset({
    "__pycache__", "node_modules", ".tox", ".eggs", "build", "dist", ".mypy_cache", ".pytest_cache",
})
BINARY_EXTS = frozenset({
    ".pyc", ".pyo", ".so", ".o", ".a", ".dylib", ".dll", ".exe", ".png", ".jpg", ".jpeg", ".gif",
    ".bmp", ".ico", ".svg", ".woff", ".woff2", ".ttf", ".eot", ".zip", ".tar", ".gz", ".bz2", ".xz",
    ".7z", ".pdf", ".doc", ".docx", ".xls", ".xlsx", ".pickle", ".pkl", ".npy", ".npz", ".h5",
    ".hdf5", ".db", ".sqlite", ".sqlite3", ".mo",
})


class FileProblem(ValueError):
    """A file a tool cannot read or write (the message says why, for the model)."""


def _open(path: Path, flags: int) -> int:
    """A descriptor of the regular file ``path`` (``flags`` plus no link, no blocking)."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except FileNotFoundError as e:
        raise FileProblem(f"No such file: {path.name}") from e
    except IsADirectoryError as e:
        raise FileProblem(f"{path.name} is a directory") from e
    except OSError as e:
        raise FileProblem(f"{path.name} cannot be opened ({e.strerror})") from e
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        what = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        raise FileProblem(f"{path.name} is {what}")
    return fd


def read_text(path: Path) -> str:
    """The UTF-8 text of the regular file ``path``.

    Raises:
        FileProblem: missing, not a regular file, too large or not UTF-8.
    """
    fd = _open(path, os.O_RDONLY)
    with os.fdopen(fd, "rb") as f:
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise FileProblem(f"{path.name} is larger than {MAX_FILE_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise FileProblem(f"{path.name} is not UTF-8 text") from e


def write_text(path: Path, text: str) -> None:
    """Write ``text`` to the regular file ``path`` (made if missing)."""
    fd = _open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


def read_numbered(path: Path, rel: str, start_line: int | None, end_line: int | None) -> str:
    """AgentFly's ``read_file``: a header, then ``{line:6d} | text`` for each line shown."""
    lines = read_text(path).splitlines(keepends=True)
    total = len(lines)
    first, last = max(1, start_line or 1), min(total, end_line or total)
    header = f"[File: {rel} ({total} lines)]"
    if start_line or end_line:
        header += f" [Showing {first}-{last}]"
    return header + "\n" + "".join(f"{i + 1:6d} | {lines[i]}" for i in range(first - 1, last))


def edit_problem(content: str, search_block: str) -> str | None:
    """Why ``search_block`` cannot be replaced in ``content`` (absent, or not once), or None."""
    count = content.count(search_block)
    if count == 0:
        return (
            "Error: search_block not found in file.\n"
            "Ensure whitespace and indentation match exactly.\n"
            "Use read_file to verify current content."
        )
    if count > 1:
        return (
            f"Error: search_block matches {count} locations.\n"
            "Include more surrounding context to make the match unique."
        )
    return None


def edit_confirmation(rel: str, new_content: str, replace_block: str) -> str:
    """AgentFly's answer to an edit: the changed lines with three lines around them."""
    lines = new_content.splitlines(keepends=True)
    at = new_content.find(replace_block)
    if at < 0:
        return f"File updated: {rel}"
    first_line = new_content[:at].count("\n")
    start = max(0, first_line - 3)
    end = min(len(lines), first_line + replace_block.count("\n") + 1 + 3)
    snippet = "".join(f"{i + 1:6d} | {lines[i]}" for i in range(start, end))
    return f"File updated: {rel}\n[Lines {start + 1}-{end}]\n{snippet}"


def _shown(name: str) -> bool:
    return not (name.startswith(".") or name in SKIP_DIRS or name.endswith(".egg-info"))


def walk(top: Path, max_depth: int | None = None, everything: bool = False) -> Iterator[Path]:
    """The regular files under ``top`` (``top`` itself if it is one), sorted, links not followed.

    Args:
        top: a directory or file inside the workspace.
        max_depth: list files of directories less than this deep below ``top`` (AgentFly's
            ``list_files``); None: all.
        everything: also hidden, build and binary files (the record's walk).
    """
    if stat.S_ISREG(_lstat_mode(top)):
        yield top
        return
    base = len(top.parts)
    for dirpath, dirs, names in os.walk(top):
        here = Path(dirpath)
        dirs[:] = sorted(d for d in dirs if everything or _shown(d))
        if max_depth is not None and len(here.parts) - base >= max_depth:
            dirs.clear()
            continue
        for name in sorted(names):
            path = here / name
            if not everything and path.suffix.lower() in BINARY_EXTS:
                continue
            if stat.S_ISREG(_lstat_mode(path)):
                yield path


def _lstat_mode(path: Path) -> int:
    try:
        return os.lstat(path).st_mode
    except OSError:
        return 0


def grep_command(pattern: str, rel: str, include: str) -> list[str]:
    """AgentFly's ``grep`` command line, searching ``rel`` from the workspace (the workspace
    itself with no operand: ``--exclude-dir .*`` would skip an operand ``.``)."""
    command = ["grep", "-rn", "--color=never", "-E"]
    if include:
        command += ["--include", include]
    for skipped in sorted(SKIP_DIRS):
        command += ["--exclude-dir", skipped]
    command += ["--exclude-dir", ".*", "-e", pattern]
    return command if rel == "." else [*command, "--", rel]


def grep_output(result: SandboxResult, max_results: int = MAX_GREP_RESULTS) -> str:
    """The answer to a ``grep_command`` run: its lines (``path:line:text``, at most
    ``max_results``), ``No matches found.`` or the error grep gave."""
    if result.timed_out:
        return "Error: grep_search timed out."
    if result.returncode not in (0, 1):
        return f"Error: {result.stderr.strip() or f'grep exited with {result.returncode}'}"
    lines = [line.removeprefix("./") for line in result.stdout.splitlines() if line]
    if not lines:
        return "No matches found."
    out = "\n".join(lines[:max_results])
    if len(lines) >= max_results or result.truncated:
        out += f"\n... (truncated at {min(len(lines), max_results)} results)"
    return out
