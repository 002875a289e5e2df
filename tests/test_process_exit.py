"""The ``agentfly`` command's process ends with its command's status, as Python would end it,
within a deadline: its threads and ``atexit`` hooks get ``timeout_s`` in all, and nothing is torn
down afterwards (:mod:`agentfly.core.process_exit`)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

PROGRAM = """
import atexit, sys, threading
from agentfly.core.process_exit import run_and_exit

class TornDown:
    def __del__(self):
        print("torn down", flush=True)

kept = TornDown()  # a module's object: deleted only when the interpreter tears its modules down
atexit.register(print, "atexit hook ran", flush=True)
{setup}
def main():
    {body}

run_and_exit(main, timeout_s=1)
"""


def run(body: str, setup: str = "") -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", PROGRAM.format(setup=setup, body=body)],
                          capture_output=True, text=True, timeout=60)
    return done, time.monotonic() - started


@pytest.mark.parametrize(("body", "status", "said"), [
    ("return 3", 3, ""),
    ("return None", 0, ""),
    ("sys.exit(143)", 143, ""),
    ("sys.exit('no such file')", 1, "no such file"),
    ("raise KeyError('a bug')", 1, "KeyError: 'a bug'"),
])
def test_the_status_is_the_commands_and_its_hooks_run(body, status, said):
    done, _ = run(body)
    assert done.returncode == status, done.stderr
    assert said in done.stderr
    assert "atexit hook ran" in done.stdout
    assert "torn down" not in done.stdout  # the interpreter's teardown is skipped


def test_a_bug_is_shown_with_its_traceback():
    done, _ = run("raise KeyError('a bug')")
    assert "Traceback (most recent call last)" in done.stderr and "in main" in done.stderr


def test_the_threads_python_waits_for_are_joined():
    setup = "threading.Thread(target=lambda: (__import__('time').sleep(0.3), print('thread done', flush=True))).start()"
    done, _ = run("return 0", setup)
    assert done.returncode == 0
    assert done.stdout.index("thread done") < done.stdout.index("atexit hook ran")


@pytest.mark.parametrize(("setup", "waiting"), [
    ("atexit.register(threading.Event().wait)", "the atexit hooks"),
    ("threading.Thread(target=threading.Event().wait, name='stuck').start()", "stuck"),
])
def test_an_exit_that_hangs_is_given_up_at_its_deadline(setup, waiting):
    """A hook or a non-daemon thread that never ends (Ray's own ``atexit`` hook after an
    abandoned ``ray.shutdown()`` waits so): the process ends at the deadline with the status."""
    done, took = run("return 5", setup)
    assert done.returncode == 5, done.stderr
    assert f"the process's exit did not finish within 1 s (waiting on {waiting})" in done.stderr
    assert took < 30


def test_the_agentfly_command_ends_so():
    """``python -m agentfly.cli`` and the ``agentfly`` script both end through
    :func:`~agentfly.core.process_exit.run_and_exit`: no teardown after the command."""
    program = ("import runpy, sys\n"
               "class TornDown:\n"
               "    def __del__(self):\n"
               "        print('torn down', flush=True)\n"
               "kept = TornDown()\n"
               "sys.argv = ['agentfly', '--version']\n"
               "runpy.run_module('agentfly.cli', run_name='__main__')\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("agentfly ") and "torn down" not in done.stdout
    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    assert '\nagentfly = "agentfly.cli.__main__:run"\n' in pyproject  # [project.scripts]
