"""Sandboxed code tries to escape, as a hostile program would; with bubblewrap every try fails.

Each try runs three ways (``run``): as ``run_code``'s program, and as a script in a chain's SWE
workspace, run by ``run_python`` and by ``run_shell_command`` (``python escape.py``), where the
workspace is the program's working directory and only writable place.

The ``needs_bwrap`` tests skip (with the reason) where bubblewrap cannot run; the machines of
``make test`` run them as root, the case the kernel treats most leniently (no ``RLIMIT_NPROC``
for uid 0, root owns ``/etc/shadow``). Without bubblewrap the code tool and the code reward
refuse to run, at compose time and when called, unless the run opts in to
``unsafe_rlimits_only``, whose own guarantees (process group, environment, working directory)
are tested here too, and whose warning names what it leaves open.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
import uuid
from pathlib import Path

import pytest

from agentfly.cli import load_config
from agentfly.config import ConfigError
from agentfly.rollout.execution import sandbox_isolation
from agentfly.rollout.execution.sandbox import (
    PythonSession,
    SandboxResult,
    SandboxUnavailableError,
    run_code,
)
from agentfly.rollout.execution.sandbox_isolation import OPT_IN_KEY
from agentfly.rollout.rewards import compute_reward
from agentfly.rollout.tools.workspace import WorkspaceSettings, workspace_of

REPO = Path(__file__).resolve().parents[2]
BWRAP_PROBLEM = sandbox_isolation.bwrap_problem()
needs_bwrap = pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=str(BWRAP_PROBLEM))
NO_BWRAP = "bwrap (bubblewrap) is not on PATH"
BASE = [
    "actor_rollout_ref.model.path=/m",
    "algorithm.adv_estimator=grpo",
    "agent.run_config.num_chains=2",
    "data.train_batch_size=2",
    "actor_rollout_ref.actor.ppo_mini_batch_size=2",
    "trainer.n_gpus_per_node=1",
    "agent.init_config.reward_name=math_equal_reward",
]


def in_workspace(tool: str):
    """``run_code``'s signature, running the program as ``escape.py`` of a fresh workspace with
    ``tool`` (``run_python`` or ``run_shell_command``)."""

    def run(
        code: str, *, timeout: float = 10.0, memory_mb: int = 1024,
        max_processes: int | None = None, cpu_seconds: float | None = None,
    ) -> SandboxResult:
        limits = {"max_processes": max_processes} if max_processes else {}
        settings = WorkspaceSettings(
            command_timeout=timeout, memory_mb=memory_mb, cpu_seconds=cpu_seconds, **limits
        )
        with workspace_of({"escape.py": code}, settings) as workspace:
            if tool == "run_python":
                return workspace.python("escape.py")
            return workspace.shell("python escape.py")

    return run


RUNNERS = {
    "run_code": run_code,
    "run_python": in_workspace("run_python"),
    "run_shell_command": in_workspace("run_shell_command"),
}


@pytest.fixture(params=sorted(RUNNERS))
def run(request: pytest.FixtureRequest):
    """A way to run a program in the sandbox: ``run_code``, or one of the SWE tools."""
    return RUNNERS[request.param]


def processes_with(marker: str) -> list[int]:
    """PIDs of the machine's processes whose command line contains ``marker``."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and entry.name != str(os.getpid()):
            try:
                cmdline = Path(entry.path, "cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline:
                found.append(int(entry.name))
    return found


def gone_within(marker: str, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while processes_with(marker):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def running_within(marker: str, count: int, seconds: float = 5.0) -> bool:
    """Whether ``count`` processes with ``marker`` run within ``seconds`` (an exec takes a moment)."""
    deadline = time.monotonic() + seconds
    while len(processes_with(marker)) < count:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def detach_code(marker: str) -> str:
    """A program that leaves a setsid child and a double-forked grandchild running 60 s."""
    sleeper = f"import time; time.sleep(60)  # {marker}"
    return (
        "import os, subprocess, sys\n"
        f"subprocess.Popen([sys.executable, '-c', {sleeper!r}], start_new_session=True,\n"
        "                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,\n"
        "                 stderr=subprocess.DEVNULL)\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        devnull = os.open(os.devnull, os.O_RDWR)\n"
        "        for fd in (0, 1, 2):\n"
        "            os.dup2(devnull, fd)\n"
        f"        os.execv(sys.executable, [sys.executable, '-c', {sleeper!r}])\n"
        "    os._exit(0)\n"
        "os.wait()\n"
        "import time\n"
        "def running():\n"  # both have exec'd: their command lines carry the marker
        "    n = 0\n"
        "    for pid in filter(str.isdigit, os.listdir('/proc')):\n"
        "        try:\n"
        f"            n += {marker!r}.encode() in open(f'/proc/{{pid}}/cmdline', 'rb').read()\n"
        "        except OSError:\n"
        "            pass\n"
        "    return n\n"
        "deadline = time.monotonic() + 5\n"
        "while running() < 2 and time.monotonic() < deadline:\n"
        "    time.sleep(0.02)\n"
        "print('detached' if running() == 2 else 'not started')\n"
    )


def kill_all(marker: str) -> None:
    for pid in processes_with(marker):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


# ---------------------------------------------------------------------------- with bubblewrap


@needs_bwrap
def test_writes_outside_the_sandbox_never_land(tmp_path: Path, run) -> None:
    tag = uuid.uuid4().hex[:8]
    bashrc = Path.home() / ".bashrc"
    before = bashrc.read_bytes() if bashrc.exists() else None
    targets = [
        REPO / f"escape-{tag}.txt",
        Path("/work") / f"escape-{tag}.txt",
        Path("/etc") / f"escape-{tag}.txt",
        tmp_path / f"escape-{tag}.txt",  # the trainer's /tmp
        Path(os.__file__).with_name(f"escape-{tag}.py"),  # the interpreter's own files
        Path("/var/tmp") / f"escape-{tag}.txt",  # writable by every user outside
    ]
    code = f"import os\nfor path in {[str(bashrc), *map(str, targets)]!r}:\n" + (
        "    try:\n"
        "        os.makedirs(os.path.dirname(path), exist_ok=True)\n"
        "        with open(path, 'a') as f:\n"
        "            f.write('escaped')\n"
        "        print('wrote', path)\n"
        "    except OSError as e:\n"
        "        print('refused', path, type(e).__name__)\n"
    )
    try:
        result = run(code)
        assert result.returncode == 0, result.stderr
        assert (bashrc.read_bytes() if bashrc.exists() else None) == before
        for target in targets:
            assert not target.exists(), f"the sandbox wrote {target}"
        # the read-only ones were refused outright, not written to a throwaway copy
        for path in (bashrc, targets[1], targets[2], targets[4], targets[5]):
            assert f"refused {path}" in result.stdout
    finally:
        for target in targets:
            target.unlink(missing_ok=True)


@needs_bwrap
@pytest.mark.skipif(not Path("/etc/shadow").exists(), reason="no /etc/shadow on this machine")
def test_etc_shadow_is_unreadable(run) -> None:
    result = run("print(open('/etc/shadow').read())")
    assert result.returncode == 1 and "PermissionError" in result.stderr
    assert result.stdout == ""


@needs_bwrap
def test_the_parents_environment_is_invisible(monkeypatch: pytest.MonkeyPatch, run) -> None:
    monkeypatch.setenv("AGENTFLY_ESCAPE_SECRET", "hunter2-" + uuid.uuid4().hex)
    secret = os.environ["AGENTFLY_ESCAPE_SECRET"]
    code = (
        "import os\n"
        "print(sorted(os.environ.items()))\n"
        f"for pid in ['1', str(os.getppid()), 'self', {str(os.getpid())!r}, "
        f"{str(os.getppid())!r}] + os.listdir('/proc'):\n"
        "    try:\n"
        "        print(pid, open(f'/proc/{pid}/environ').read())\n"
        "    except OSError as e:\n"
        "        print(pid, type(e).__name__)\n"
    )
    result = run(code)
    assert result.returncode == 0, result.stderr
    assert secret not in result.stdout
    environ = dict(eval(result.stdout.splitlines()[0]))  # the program's own sorted items
    shells = {"SHLVL", "_"} if run is RUNNERS["run_shell_command"] else set()  # bash's own
    assert set(environ) <= {*sandbox_isolation.SANDBOX_ENV, "PWD", *shells}
    with PythonSession() as session:
        cell = session.run("import os; dict(os.environ)")
        assert "AGENTFLY_ESCAPE_SECRET" not in cell.stdout and cell.error is None


def fork_bomb(child_sleep_s: int) -> str:
    """Code that forks 200 sleeping children, says how the fork was refused and how many started."""
    return (
        "import os, time\n"
        "started = 0\n"
        "try:\n"
        "    for _ in range(200):\n"
        "        if os.fork() == 0:\n"
        f"            time.sleep({child_sleep_s})\n"
        "            os._exit(0)\n"
        "        started += 1\n"
        "except OSError as e:\n"
        "    print('refused', type(e).__name__)\n"
        "print('started', started)\n"
    )


@needs_bwrap
def test_a_fork_bomb_is_stopped_at_max_processes(run) -> None:
    result = run(fork_bomb(30), max_processes=16, timeout=20)
    assert not result.timed_out and result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "refused BlockingIOError"  # EAGAIN: RLIMIT_NPROC
    started = int(lines[1].split()[1])
    assert started <= 15  # 16 tasks at most, the program itself included


@needs_bwrap
def test_detached_children_die_with_the_call_and_the_session(run) -> None:
    marker = f"agentfly-detached-{uuid.uuid4().hex}"
    try:
        result = run(detach_code(marker))
        assert result.stdout == "detached\n", result.stderr
        assert gone_within(marker), "a detached child outlived the call"
        if run is not run_code:
            return
        with PythonSession() as session:
            cell = session.run(detach_code(marker))
            assert cell.stdout == "detached\n", cell.stderr
            assert running_within(marker, 2)  # they run while the session lives
        assert gone_within(marker), "a detached child outlived the session"
    finally:
        kill_all(marker)


@needs_bwrap
def test_killing_the_parent_does_not_touch_the_trainer(run) -> None:
    me = os.getpid()
    code = (
        "import os, signal\n"
        f"for pid in (os.getppid(), 1, {me}, {os.getppid()}):\n"
        "    try:\n"
        "        os.kill(pid, signal.SIGKILL)\n"
        "        print(pid, 'sent')\n"
        "    except OSError as e:\n"
        "        print(pid, type(e).__name__)\n"
    )
    result = run(code)
    assert result.returncode == 0 and "sent" not in result.stdout, result.stdout
    with PythonSession() as session:
        session.run("import os; os.kill(os.getppid(), 9)")
        assert session.run("1 + 1").stdout == "2\n"
    os.kill(me, 0)  # the test process (the trainer's stand-in) is alive


@needs_bwrap
def test_cpu_time_is_capped_below_the_wall_clock(run) -> None:
    result = run("while True:\n    pass\n", timeout=60, cpu_seconds=1)
    assert not result.timed_out  # SIGXCPU ended it, not the wall clock
    assert result.returncode in (-signal.SIGXCPU, 128 + signal.SIGXCPU)  # bwrap's exit is 128+n


@needs_bwrap
def test_memory_is_capped_per_process(run) -> None:
    code = (
        "import os\n"
        "if os.fork() == 0:\n"
        "    try:\n"
        "        bytearray(2 * 1024**3)\n"
        "        print('child allocated', flush=True)\n"
        "    except MemoryError:\n"
        "        print('child refused', flush=True)\n"
        "    os._exit(0)\n"
        "os.wait()\n"
        "bytearray(2 * 1024**3)\n"
    )
    result = run(code, memory_mb=256)
    assert result.stdout == "child refused\n" and "MemoryError" in result.stderr


# ------------------------------------------------------------------------ without bubblewrap


@pytest.fixture
def no_bwrap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox_isolation, "bwrap_problem", lambda: NO_BWRAP)


def test_without_bwrap_the_sandbox_refuses_to_run(no_bwrap: None) -> None:
    for start in (lambda: run_code("print(1)"), PythonSession):
        with pytest.raises(SandboxUnavailableError) as info:
            start()
        message = str(info.value)
        for needle in (NO_BWRAP, "make install", "apt-get install bubblewrap", OPT_IN_KEY):
            assert needle in message


def test_without_bwrap_a_run_with_the_code_tool_is_refused_at_compose_time(
    no_bwrap: None,
) -> None:
    with pytest.raises(ConfigError) as info:
        load_config([*BASE, "agent.init_config.tools=[python_executor]"], check_required=False)
    message = str(info.value)
    assert "agent.init_config.tool_config.code_interpreter" in message
    assert NO_BWRAP in message and OPT_IN_KEY in message and "make install" in message
    opted_in = "agent.init_config.tool_config.python_executor.isolation=unsafe_rlimits_only"
    load_config([*BASE, "agent.init_config.tools=[python_executor]", opted_in])
    load_config([*BASE, "agent.init_config.tools=[calculator]"], check_required=False)


def test_without_bwrap_the_code_reward_is_refused_at_compose_time_and_when_called(
    no_bwrap: None,
) -> None:
    with pytest.raises(ConfigError) as info:
        load_config([*BASE, "agent.init_config.reward_name=code_reward"])
    message = str(info.value)
    assert "agent.init_config.reward_name='code_reward'" in message and NO_BWRAP in message
    assert "agent.init_config.reward_name=code_reward_unsafe_rlimits_only" in message
    load_config([*BASE, "agent.init_config.reward_name=code_reward_unsafe_rlimits_only"])
    row = {"test_list": ["assert 1 + 1 == 2"]}
    refused = compute_reward("code_reward", "print(1)", row=row)
    assert refused.failed and NO_BWRAP in refused.error  # a failure, never a silent 0
    opted = compute_reward("code_reward_unsafe_rlimits_only", "print(1)", row=row)
    assert not opted.failed and opted.reward == 1.0


@pytest.mark.parametrize("old", ["auto", "rlimits"])
def test_the_old_isolations_are_refused_naming_the_new_ones(old: str) -> None:
    key = f"agent.init_config.tool_config.code_interpreter.isolation={old}"
    with pytest.raises(ConfigError) as info:
        load_config([*BASE, "agent.init_config.tools=[code_interpreter]", key])
    assert "'bwrap'" in str(info.value) and "'unsafe_rlimits_only'" in str(info.value)
    with pytest.raises(ValueError, match="unsafe_rlimits_only"):
        run_code("print(1)", isolation=old)


def test_the_opt_in_runs_and_warns_what_is_not_contained(
    no_bwrap: None, caplog: pytest.LogCaptureFixture
) -> None:
    sandbox_isolation.warn_unsafe.cache_clear()
    with caplog.at_level(logging.WARNING, logger="agentfly.rollout.execution.sandbox"):
        first = run_code("print(1)", isolation="unsafe_rlimits_only")
        with PythonSession(isolation="unsafe_rlimits_only") as session:
            assert session.run("2").stdout == "2\n"
    assert first.stdout == "1\n"
    warnings = [r.getMessage() for r in caplog.records if "unsafe_rlimits_only" in r.getMessage()]
    assert len(warnings) == 1  # once per process
    for needle in ("file system", "network", "/proc", "environ", "os.kill", "detach", "setsid"):
        assert needle in warnings[0]
    sandbox_isolation.warn_unsafe.cache_clear()


def test_the_opt_in_kills_the_process_group_after_each_call() -> None:
    marker = f"agentfly-grouped-{uuid.uuid4().hex}"
    code = (
        "import subprocess, sys\n"
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)  # {marker}'],\n"
        "                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "print('spawned')\n"
    )
    try:
        result = run_code(code, isolation="unsafe_rlimits_only")
        assert result.stdout == "spawned\n"
        assert gone_within(marker), "a child in the sandbox's process group outlived the call"
    finally:
        kill_all(marker)


def test_the_opt_in_does_not_contain_detached_children() -> None:
    """What the warning says: a detached child survives the call (killed here by the test)."""
    marker = f"agentfly-unsafe-detached-{uuid.uuid4().hex}"
    try:
        result = run_code(detach_code(marker), isolation="unsafe_rlimits_only")
        assert result.stdout == "detached\n", result.stderr
        assert running_within(marker, 2)
    finally:
        kill_all(marker)


@pytest.mark.skipif(os.geteuid() == 0, reason="the kernel never applies RLIMIT_NPROC to root")
def test_the_opt_in_limits_processes_where_the_kernel_does() -> None:
    result = run_code(fork_bomb(10), isolation="unsafe_rlimits_only", max_processes=16)
    assert result.stdout.startswith("refused BlockingIOError")
