"""The sandbox: run_code and PythonSession, with and without bubblewrap.

Tests marked ``needs_bwrap`` check the file-system and network isolation only bubblewrap gives;
they are skipped where ``bwrap`` is not installed or cannot make namespaces. Everything else runs
under both isolations. The escape attempts are in ``test_sandbox_escape.py``.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from agentfly.rollout.execution import sandbox, sandbox_isolation
from agentfly.rollout.execution.sandbox import PythonSession, run_code

REPO = Path(__file__).resolve().parents[2]
BWRAP_PROBLEM = sandbox.bwrap_problem()
needs_bwrap = pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=str(BWRAP_PROBLEM))
ISOLATIONS = ["unsafe_rlimits_only", pytest.param("bwrap", marks=needs_bwrap)]


@pytest.fixture(params=ISOLATIONS)
def isolation(request: pytest.FixtureRequest) -> str:
    return request.param


def test_run_code_output_stdin_and_exit_status(isolation: str) -> None:
    code = (
        "import sys\nname = input()\nprint('hello', name)\nprint(sys.stdin.read().upper(), end='')"
    )
    result = run_code(code, stdin="ada\nrest of input\n", isolation=isolation)
    assert result.stdout == "hello ada\nREST OF INPUT\n"
    assert (result.returncode, result.timed_out, result.truncated) == (0, False, False)

    exits = run_code("import sys; print('bye'); sys.exit(3)", isolation=isolation)
    assert exits.returncode == 3 and exits.stdout == "bye\n"


def test_run_code_traceback_shows_the_users_code(isolation: str) -> None:
    result = run_code("def f():\n    return 1 / 0\nf()\n", isolation=isolation)
    assert result.returncode == 1
    assert 'File "main.py", line 2, in f' in result.stderr
    assert "return 1 / 0" in result.stderr
    assert result.stderr.rstrip().endswith("ZeroDivisionError: division by zero")
    assert "sandbox_worker" not in result.stderr and "exec(" not in result.stderr


def test_child_cannot_read_the_parents_environment(
    isolation: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTFLY_TEST_SECRET", "hunter2")
    result = run_code(
        "import os; print(os.environ.get('AGENTFLY_TEST_SECRET')); print(sorted(os.environ))",
        isolation=isolation,
    )
    assert result.stdout.splitlines()[0] == "None"
    assert "hunter2" not in result.stdout


def test_infinite_loop_is_killed_at_the_timeout(isolation: str) -> None:
    start = time.monotonic()
    result = run_code("while True:\n    pass\n", timeout=1.0, isolation=isolation)
    assert time.monotonic() - start < 3
    assert result.timed_out and result.returncode == -9


def test_memory_bomb_is_stopped(isolation: str) -> None:
    result = run_code(
        "x = bytearray(2 * 1024**3)\nprint('allocated')", memory_mb=256, isolation=isolation
    )
    assert result.returncode != 0 and "allocated" not in result.stdout
    assert "MemoryError" in result.stderr


def test_output_flood_is_truncated(isolation: str) -> None:
    result = run_code("print('x' * 100_000)", max_output_chars=50, isolation=isolation)
    assert result.stdout == "x" * 50 and result.truncated


def test_fallback_runs_in_a_fresh_temporary_directory() -> None:
    result = run_code(
        "import os; print(os.getcwd()); print(os.listdir('.'))", isolation="unsafe_rlimits_only"
    )
    cwd, listing = result.stdout.splitlines()
    assert Path(cwd).name.startswith("agentfly-sandbox-") and listing == "[]"
    assert not Path(cwd).exists()  # removed afterwards


@needs_bwrap
def test_bwrap_hides_the_repository_and_home() -> None:
    code = (
        f"import os\nprint(os.path.exists({str(REPO / 'pyproject.toml')!r}))\n"
        "print(os.listdir('/root') if os.path.isdir('/root') else 'no root')\n"
        "print(os.getuid())"
    )
    result = run_code(code, isolation="bwrap")
    exists, root_listing, uid = result.stdout.splitlines()
    assert exists == "False"
    assert "hunter" not in root_listing and ".bashrc" not in root_listing
    if os.geteuid() == 0:  # a uid of its own, none of the machine's users
        assert int(uid) >= sandbox_isolation.SANDBOX_UID_BASE
    else:
        assert uid == "65534"


@needs_bwrap
def test_bwrap_child_cannot_write_to_the_repository() -> None:
    target = REPO / "agentfly_sandbox_escape_test.txt"
    code = (
        "import os\n"
        f"os.makedirs({str(REPO)!r}, exist_ok=True)\n"
        f"open({str(target)!r}, 'w').write('escaped')\n"
        "print('wrote inside the sandbox')"
    )
    try:
        result = run_code(code, isolation="bwrap")
        assert not target.exists(), "the sandbox wrote into the real repository"
        assert "wrote inside the sandbox" not in result.stdout  # /work is root's empty tmpfs
    finally:
        target.unlink(missing_ok=True)
    venv = run_code(f"open({os.__file__ + '.pwn'!r}, 'w')", isolation="bwrap")
    assert venv.returncode == 1 and ("Read-only" in venv.stderr or "Permission" in venv.stderr)


@needs_bwrap
def test_bwrap_child_has_no_network() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    try:
        code = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\nprint('connected')"
        inside = run_code(code, isolation="bwrap")
        assert "connected" not in inside.stdout and "ConnectionRefusedError" in inside.stderr
        outside = run_code(code, isolation="unsafe_rlimits_only")  # the listener is really there
        assert outside.stdout == "connected\n"
    finally:
        listener.close()


def test_session_keeps_state_and_prints_the_last_expression(isolation: str) -> None:
    with PythonSession(isolation=isolation) as session:
        assert session.run("x = 20\ndef double(v):\n    return 2 * v").stdout == ""
        result = session.run("print('x is', x)\ndouble(x) + 2")
        assert result.stdout == "x is 20\n42\n" and result.error is None
        assert session.run("None").stdout == ""  # like a notebook: None is not shown


def test_session_reports_errors_and_goes_on(isolation: str) -> None:
    with PythonSession(isolation=isolation) as session:
        session.run("y = 1")
        error = session.run("def f():\n    return missing_name\nf()")
        assert error.error == "NameError"
        assert "return missing_name" in error.stderr and "<cell 2>" in error.stderr
        assert session.run("input()").error == "EOFError"  # no stdin for cells
        assert session.run("raise SystemExit(4)").error == "SystemExit"  # does not end the session
        assert session.run("syntax error(").error == "SyntaxError"
        assert session.run("y + 1").stdout == "2\n"  # the state survived all of it


def test_session_timeout_restarts_the_worker(isolation: str) -> None:
    with PythonSession(timeout=1.0, isolation=isolation) as session:
        session.run("kept = 'before'")
        first_pid = session.pid
        start = time.monotonic()
        result = session.run("while True:\n    pass")
        assert time.monotonic() - start < 4
        assert result.timed_out and result.restarted and result.error == "Timeout"
        assert "all variables are lost" in result.stderr
        assert session.pid != first_pid
        with pytest.raises(ProcessLookupError):
            os.kill(first_pid, 0)
        assert session.run("kept").error == "NameError"
        assert session.run("1 + 1").stdout == "2\n"  # the new worker works


def test_session_memory_bomb(isolation: str) -> None:
    with PythonSession(memory_mb=256, isolation=isolation) as session:
        session.run("small = [1, 2, 3]")
        bomb = session.run("big = bytearray(2 * 1024**3)")
        assert bomb.error == "MemoryError"
        assert session.run("len(small)").stdout == "3\n"


def test_session_close_kills_the_worker(isolation: str) -> None:
    session = PythonSession(isolation=isolation)
    pid = session.pid
    os.kill(pid, 0)  # alive
    session.close()
    session.close()  # twice is fine
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with pytest.raises(RuntimeError, match="closed"):
        session.run("1")


def test_session_output_is_capped(isolation: str) -> None:
    with PythonSession(max_output_chars=100, isolation=isolation) as session:
        result = session.run("print('y' * 5000)")
        assert result.stdout == "y" * 100 and result.truncated


def test_sessions_do_not_share_state(isolation: str) -> None:
    with PythonSession(isolation=isolation) as a, PythonSession(isolation=isolation) as b:
        a.run("secret = 'only in a'")
        assert b.run("secret").error == "NameError"
        assert a.run("secret").stdout == "'only in a'\n"
