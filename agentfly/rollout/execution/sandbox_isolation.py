"""How sandboxed code is contained: the ``isolation`` setting, the bubblewrap command, the refusals.

Two isolations, one setting (``isolation`` of ``run_code``/``PythonSession``, of the
``code_interpreter`` tool, and the choice between ``code_reward`` and
``code_reward_unsafe_rlimits_only``):

- ``"bwrap"`` (the default): the child runs under bubblewrap, in its own PID, network, IPC and
  UTS namespaces (no network but a loopback that is down; it sees only its own processes in
  ``/proc``), over a read-only view of ``/`` where ``/tmp`` is a private writable tmpfs and
  ``/work``, ``/root``, ``/home``, ``/run``, ``/mnt``, ``/srv``, the repository and the working
  directory are empty tmpfs (the Python installation is mounted back read-only). The environment
  is cleared (``--clearenv``) and only ``SANDBOX_ENV`` is set. When the trainer runs as root the
  child drops to a uid of its own (``sandbox_uid``: ``SANDBOX_UID_BASE`` + a per-sandbox offset,
  no groups, no capabilities, ``no_new_privs``) before running anything, so root's files
  (``/etc/shadow``) are unreadable and ``RLIMIT_NPROC`` counts only that sandbox's processes (the
  kernel never applies it to uid 0); otherwise bubblewrap makes a user namespace (uid 65534
  inside), where the kernel counts processes per namespace. When the call ends, bubblewrap's PID
  namespace dies with it, taking every process of the sandbox along, detached ones included.
  A caller's working directory (``workdir``, the SWE tools' per-chain workspace) is bound
  writable at ``WORKDIR_MOUNT`` and is the child's working directory: the one place besides the
  private ``/tmp`` where it can write.
  Where bubblewrap cannot run, this isolation is refused (``SandboxUnavailableError``, or at
  config time :func:`isolation_problem`) with the reason, how to install it and the opt-in key.
- ``"unsafe_rlimits_only"``: the explicit opt-in to run untrusted code without containment:
  resource limits, a fresh environment and a fresh temporary directory only. A warning
  (``UNSAFE_WARNING``) names everything that is then not contained.
"""

from __future__ import annotations

import itertools
import logging
import os
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Literal, get_args

logger = logging.getLogger("agentfly.rollout.execution.sandbox")

Isolation = Literal["bwrap", "unsafe_rlimits_only"]
ISOLATIONS: tuple[str, ...] = get_args(Isolation)
#: the config override that opts the code tool out of containment
OPT_IN_KEY = "agent.init_config.tool_config.code_interpreter.isolation=unsafe_rlimits_only"
#: sandboxes of a root trainer run as uids from here on (none of them a real user's)
SANDBOX_UID_BASE = 0x70000000
#: where a caller's working directory appears inside bubblewrap (under the private ``/tmp``,
#: which every sandbox has: a new directory cannot be made on the read-only root)
WORKDIR_MOUNT = "/tmp/testbed"
SANDBOX_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/tmp",
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "PYTHONIOENCODING": "utf-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}
UNSAFE_WARNING = (
    "isolation='unsafe_rlimits_only': untrusted code runs with resource limits only (memory, CPU "
    "time, open files, file size, process count (not for root), wall clock; its process group is "
    "killed after each call) and a fresh environment and working directory. NOT contained: the "
    "file system is readable and writable as this user ({user}: ~/.bashrc, the repository, the "
    "checkpoints{root}); the network is open; other processes and /proc are visible (the "
    "trainer's environment, secrets included, in /proc/<ppid>/environ) and every process of this "
    "user can be signalled, the trainer included (os.kill(os.getppid(), 9)); children that detach "
    "(setsid, double fork) survive the call and the session. Install bubblewrap (`make install` "
    "or `apt-get install bubblewrap`) and use isolation='bwrap' to contain it."
)

_WORKER = Path(__file__).with_name("sandbox_worker.py")
_HIDDEN = ("/tmp", "/work", "/root", "/home", "/run", "/mnt", "/srv")
_SYSTEM = {"/", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc", "/proc", "/dev", "/sys", "/opt"}
_uid_offsets = itertools.count()


class SandboxUnavailableError(RuntimeError):
    """``isolation="bwrap"`` where bubblewrap cannot run (the message says why and what to do)."""


def check_isolation(isolation: str) -> None:
    """Refuse an isolation that is not one of ``ISOLATIONS``.

    Raises:
        ValueError: naming the accepted values.
    """
    if isolation not in ISOLATIONS:
        raise ValueError(
            f"isolation={isolation!r} is not one of {', '.join(map(repr, ISOLATIONS))}: 'bwrap' "
            "contains the code (the default), 'unsafe_rlimits_only' runs it with resource limits "
            "only ('auto' and 'rlimits' no longer exist: a missing bubblewrap is never silently "
            "worked around)"
        )


def is_root() -> bool:
    return os.geteuid() == 0


@cache
def bwrap_path() -> str | None:
    return shutil.which("bwrap")


def sandbox_uid() -> int:
    """A uid for one sandbox of a root trainer (two sandboxes rarely share one; if they do, they
    share a process-count budget, nothing else: each sees only its own PID namespace)."""
    return SANDBOX_UID_BASE + (os.getpid() * 4096 + next(_uid_offsets)) % (1 << 24)


@cache
def worker_source() -> str:
    return _WORKER.read_text(encoding="utf-8")


def _is_under(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def _parents_below(path: str, top: str) -> list[str]:
    """The directories strictly between ``top`` and ``path``, outermost first."""
    parts = Path(path).relative_to(top).parts[:-1]
    return [str(Path(top, *parts[: i + 1])) for i in range(len(parts))]


@cache
def bwrap_prefix() -> tuple[str, ...]:
    """The bubblewrap command that precedes the worker's (see the module docstring)."""
    repo = str(Path(__file__).resolve().parents[3])
    hidden = [p for p in (*_HIDDEN, repo, os.getcwd()) if p not in _SYSTEM and os.path.isdir(p)]
    hidden = [
        p for p in dict.fromkeys(hidden) if not any(_is_under(p, h) for h in _HIDDEN if h != p)
    ]
    interpreter = {sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    rebind = [p for p in interpreter if any(_is_under(p, h) for h in hidden)]
    rebind = sorted(p for p in rebind if not any(_is_under(p, q) and p != q for q in rebind))
    args = [bwrap_path() or "bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    for path in hidden:
        args += ["--perms", "1777" if path == "/tmp" else "0755", "--tmpfs", path]
    made: set[str] = set()
    for path in rebind:
        top = next(h for h in hidden if _is_under(path, h))
        for parent in _parents_below(path, top):
            if parent not in made:  # readable by the sandbox's uid, whatever the real mode
                args += ["--perms", "0755", "--dir", parent]
                made.add(parent)
        args += ["--ro-bind", path, path]
    args += ["--clearenv"]
    for name, value in SANDBOX_ENV.items():
        args += ["--setenv", name, value]
    args += ["--die-with-parent", "--chdir", "/tmp"]
    if is_root():  # no user namespace: the worker drops to its own uid (sandbox_uid)
        args += ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts"]
        args += ["--unshare-cgroup-try", "--cap-drop", "ALL"]
        args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        args += ["--unshare-all", "--cap-drop", "ALL", "--uid", "65534", "--gid", "65534"]
    return (*args, "--")


def worker_command(
    mode: str, limits: dict, *extra: str, bwrap: bool, workdir: str | None = None
) -> list[str]:
    """The command that runs ``sandbox_worker.py`` in ``mode`` under ``limits``; under bwrap,
    ``workdir`` (if given) is bound writable at ``WORKDIR_MOUNT`` and is the working directory."""
    import json

    python = [sys.executable, "-I", "-c", worker_source(), mode, json.dumps(limits), *extra]
    if not bwrap:
        return python
    prefix = list(bwrap_prefix())
    if workdir is not None:  # bound after /tmp's tmpfs, and the working directory instead of /tmp
        at = prefix.index("--chdir")
        prefix[at : at + 2] = ["--bind", workdir, WORKDIR_MOUNT, "--chdir", WORKDIR_MOUNT]
    return [*prefix, *python]


_DROP_AND_EXEC = (
    "import os, sys\n"
    "uid = int(sys.argv[1])\n"
    "os.setgroups([]); os.setgid(uid); os.setuid(uid)\n"
    "if os.getuid() == 0 or os.geteuid() == 0: raise SystemExit('sandbox: could not drop root privileges')\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


def program_command(
    argv: list[str], *, env: dict[str, str], read_only: list[tuple[str, str]], chdir: str
) -> list[str]:
    """``argv`` under bubblewrap for a program that must reach a server on this host (an
    ``agent.harness`` command): the sandbox's containment (a read-only ``/``, a private ``/tmp``,
    the hidden folders, its own PID, IPC and UTS namespaces, no capabilities, a root trainer's
    uid drop, every process dying with it) but the host's network; ``read_only`` binds
    ``(source, target)`` pairs read-only (after the hidden folders, so a hidden one can come
    back), ``chdir`` is its working directory, and its environment is ``SANDBOX_ENV`` plus
    ``env``.
    """
    prefix = list(bwrap_prefix())[:-1]  # "--" last
    if "--unshare-net" in prefix:
        prefix.remove("--unshare-net")
    if "--unshare-all" in prefix:
        prefix.insert(prefix.index("--unshare-all") + 1, "--share-net")
    at = prefix.index("--chdir")
    binds = [arg for source, target in read_only for arg in ("--ro-bind", source, target)]
    prefix[at : at + 2] = [*binds, "--chdir", chdir]
    for name, value in env.items():
        prefix += ["--setenv", name, value]
    if is_root():  # the child drops to a uid of its own before running the program
        argv = [sys.executable, "-I", "-c", _DROP_AND_EXEC, str(sandbox_uid()), *argv]
    return [*prefix, "--", *argv]


@cache
def bwrap_problem() -> str | None:
    """Why bubblewrap cannot sandbox code here, or ``None`` when it can (probed once: the real
    command, the uid drop included, runs an empty program)."""
    if bwrap_path() is None:
        return "bwrap (bubblewrap) is not on PATH"
    limits = {"memory_mb": 1024, "max_open_files": 64, "max_file_mb": 1, "max_processes": 8}
    if is_root():
        limits["uid"] = sandbox_uid()
    try:
        probe = subprocess.run(
            worker_command("oneshot", limits, "0", bwrap=True),
            capture_output=True,
            env=dict(SANDBOX_ENV),
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bwrap failed to start ({e})"
    if probe.returncode != 0:
        return f"bwrap cannot make a sandbox here ({probe.stderr.decode(errors='replace').strip()})"
    return None


def isolation_problem(isolation: str, opt_in: str = OPT_IN_KEY) -> str | None:
    """Why untrusted code cannot run under ``isolation`` here, or ``None`` when it can.

    Args:
        isolation: one of ``ISOLATIONS``.
        opt_in: the setting that opts the caller out of containment, for the message.
    """
    try:
        check_isolation(isolation)
    except ValueError as e:
        return str(e)
    if isolation == "unsafe_rlimits_only":
        return None
    problem = bwrap_problem()
    if problem is None:
        return None
    return (
        f"isolation='bwrap' but {problem}, so untrusted code cannot be contained. Install "
        "bubblewrap with `make install` (scripts/install_system_packages.sh) or `apt-get install "
        "bubblewrap` (a non-root user also needs unprivileged user namespaces), or, to run it "
        f"with resource limits only and nothing else contained, opt in with {opt_in}"
    )


@cache
def warn_unsafe() -> None:
    """Say once per process what ``unsafe_rlimits_only`` leaves uncontained."""
    user = "root" if is_root() else f"uid {os.getuid()}"
    root = ", /etc/shadow, every file of the machine" if is_root() else ""
    logger.warning(UNSAFE_WARNING.format(user=user, root=root))


def use_bwrap(isolation: str) -> bool:
    """Whether code runs inside bubblewrap under ``isolation`` (warns for the opt-in).

    Raises:
        ValueError: an unknown isolation.
        SandboxUnavailableError: ``"bwrap"`` where bubblewrap cannot run.
    """
    check_isolation(isolation)
    problem = isolation_problem(isolation)
    if problem is not None:
        raise SandboxUnavailableError(problem)
    if isolation == "unsafe_rlimits_only":
        warn_unsafe()
        return False
    return True


def user_tasks(uid: int) -> int:
    """Tasks (threads) the kernel counts against ``uid``'s ``RLIMIT_NPROC`` right now."""
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            status = Path(entry.path, "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if int(fields.get("Uid", "-1 ").split()[0]) == uid:
            total += int(fields.get("Threads", "1"))
    return total
