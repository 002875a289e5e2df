"""A fit with a Ray engine pool leaves no process behind, however it ends: SIGTERM to the trainer
mid-run, an exception in a training step, SIGKILL; a Ray shutdown that hangs is cut at its
deadline, and so is a whole stop after SIGTERM (the watchdog of :func:`sigterm_exits`). Every
process of a run is tracked (:class:`Tracker`): the trainer's descendants, noted while it runs
(Ray's head, raylet, GCS, its dashboard and runtime-env agents, the engine actor), and every
process whose environment holds the run's own ``RAY_TMPDIR`` (found even once the trainer is
gone; Ray's agents rewrite their environment, so they are found the first way)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from agentfly.core.process_exit import EXIT_HOOKS_TIMEOUT_S
from agentfly.core.reaper import gone
from agentfly.core.shutdown import EXIT_DEADLINE_S
from tests.fit_runs import fit_args, processes_of, write_task


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    return write_task(tmp_path_factory.mktemp("orphans"), [(1, 2), (3, 4)])


class Tracker:
    """The processes of one run: call :meth:`look` while it runs, :meth:`survivors` after."""

    def __init__(self, proc: subprocess.Popen, ray_tmp: str) -> None:
        self.root = psutil.Process(proc.pid)
        self.marker = f"RAY_TMPDIR={ray_tmp}"
        self.seen: dict[int, psutil.Process] = {}
        self.names: dict[int, str] = {}  # the newest command line of each
        self.ever: set[str] = set()  # every command line seen

    def look(self) -> set[str]:
        """Note the run's processes now; returns the command lines of all those seen so far."""
        try:
            found = self.root.children(recursive=True)
        except psutil.Error:
            found = []
        for proc in [*found, *processes_of(self.marker), *self.seen.values()]:
            try:  # a Ray worker renames itself when it becomes an actor: keep the newest name
                self.names[proc.pid] = " ".join(proc.cmdline()).strip()
                self.ever.add(self.names[proc.pid])
            except psutil.Error:
                continue
            self.seen.setdefault(proc.pid, proc)
        return set(self.ever)

    def survivors(self, within_s: float = 15) -> list[str]:
        """The run's processes still running after ``within_s`` seconds (``pid cmdline`` each)."""
        self.look()
        deadline = time.monotonic() + within_s
        while (left := [p for p in self.seen.values() if not gone(p)]) and time.monotonic() < deadline:
            time.sleep(0.2)
        return [f"{proc.pid} {self.names[proc.pid][:160]}" for proc in left]


def has(names: set[str], *programs: str) -> bool:
    return all(any(program in name for name in names) for program in programs)


def launch(task, run: Path, ray_tmp: str, log: Path, steps: int, extra=()) -> subprocess.Popen:
    root, model = task
    args = fit_args(root, model, run, steps, ["actor_rollout_ref.rollout.num_engines=1", *extra])
    env = {**os.environ, "RAY_TMPDIR": ray_tmp, "WANDB_MODE": "offline"}
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-m", "agentfly.cli", *args], stdout=out,
                                stderr=subprocess.STDOUT, env=env)


@pytest.fixture
def ray_tmp():
    path = tempfile.mkdtemp(prefix="rayo", dir="/tmp")  # Ray's socket paths stay under 108 bytes
    yield path
    for proc in processes_of(f"RAY_TMPDIR={path}"):  # whatever a failed test left behind
        proc.kill()
    import shutil

    shutil.rmtree(path, ignore_errors=True)


#: how long a run may take to start and reach its first checkpoint (or its failure): 55 s with
#: the load average at 5-6 on two cores, up to 260 s at 10-16
START_S = 480
#: how often a test notes the run's processes: a look reads every process's environment (tens of
#: milliseconds on a busy machine), CPU the run being watched would otherwise have
LOOK_EVERY_S = 0.5


@pytest.mark.slow
def test_sigterm_mid_run_stops_every_process_of_the_run(task, tmp_path, ray_tmp):
    """The process ends within its bound however loaded the machine (the orderly stop within
    ``EXIT_DEADLINE_S`` of the signal, or the watchdog's kill; then the exit's hooks within
    ``EXIT_HOOKS_TIMEOUT_S``), with 143 and none of its processes left."""
    run, log = tmp_path / "run", tmp_path / "fit.log"
    proc = launch(task, run, ray_tmp, log, 1000)
    tracker = Tracker(proc, ray_tmp)
    try:
        deadline = time.monotonic() + START_S
        while not (run / "checkpoints" / "iter_000001.ckpt").exists():
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, f"no checkpoint within {START_S} s"
            tracker.look()
            time.sleep(LOOK_EVERY_S)
        names = tracker.look()
        assert has(names, "raylet", "gcs_server", "ray::EngineHost", "ray::DashboardAgent"), names
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=EXIT_DEADLINE_S + EXIT_HOOKS_TIMEOUT_S + 20)  # 20 s: killing and reaping
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    said = log.read_text()
    assert proc.returncode == 143, said[-3000:]  # agentfly's handler, not Ray's (15)
    assert "SIGTERM: stopping the run" in said, said[-3000:]
    assert tracker.survivors() == [], said[-3000:]


@pytest.mark.slow
def test_an_exception_in_a_training_step_stops_every_process_of_the_run(task, tmp_path, ray_tmp):
    run, log = tmp_path / "run", tmp_path / "fit.log"
    fail = ["--trainer.callbacks+=tests.planted.Fail",
            "--trainer.callbacks.hook", "train_batch_end"]
    proc = launch(task, run, ray_tmp, log, 2, fail)
    tracker = Tracker(proc, ray_tmp)
    try:
        deadline = time.monotonic() + START_S + EXIT_DEADLINE_S
        while proc.poll() is None and time.monotonic() < deadline:
            tracker.look()
            time.sleep(LOOK_EVERY_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    said = log.read_text()
    assert proc.returncode != 0 and "planted failure" in said, said[-3000:]
    names = tracker.look()
    assert has(names, "raylet", "gcs_server", "ray::EngineHost"), names  # a lot to stop
    assert tracker.survivors() == [], said[-3000:]


POOL_THEN_SLEEP = """
import sys, time
from agentfly.rollout.engines import EnginePool
pool = EnginePool("scripted", 1, engine_kwargs={"model": sys.argv[1], "script": ["hi"]},
                  num_cpus_per_engine=0.5)
print("pool up", flush=True)
time.sleep(600)
"""


@pytest.mark.slow
def test_a_trainer_killed_outright_leaves_no_ray_process(task, ray_tmp, tmp_path):
    """SIGKILL (the OOM killer) gives the trainer no chance to stop Ray: Ray's head follows it,
    its dashboard and runtime-env agents do not, and agentfly.core.reaper kills them."""
    _, model = task
    env = {**os.environ, "RAY_TMPDIR": ray_tmp}
    log = tmp_path / "pool.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", POOL_THEN_SLEEP, str(model)], stdout=out,
                                stderr=subprocess.STDOUT, env=env)
    tracker = Tracker(proc, ray_tmp)
    try:
        deadline = time.monotonic() + START_S
        while "pool up" not in log.read_text():
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, f"the pool did not come up within {START_S} s"
            tracker.look()
            time.sleep(LOOK_EVERY_S)
        # what outlived a SIGKILLed trainer, and the watcher that ends them
        while not has(names := tracker.look(), "ray::DashboardAgent", "ray::RuntimeEnvAgent", "agentfly.core.reaper"):
            assert time.monotonic() < deadline, f"Ray's agents or the reaper did not start: {names}"
            time.sleep(0.2)
        time.sleep(1.5)  # the reaper has looked at least once since they started
    finally:
        proc.kill()
        proc.wait()
    assert tracker.survivors() == [], log.read_text()[-3000:]


def test_a_ray_shutdown_that_hangs_is_abandoned_at_its_deadline_and_ray_killed(monkeypatch, caplog):
    """``ray.shutdown()`` that never returns: :func:`stop_ray` gives up on it after
    ``timeout_s`` and kills Ray's processes (here two stand-ins, found as Ray's would be)."""
    import logging
    import threading

    import ray

    from agentfly.core import reaper, shutdown

    stand_ins = [subprocess.Popen(["sleep", "120"]) for _ in range(2)]
    release = threading.Event()
    monkeypatch.setattr(shutdown, "ray_is_initialized", lambda: True)
    monkeypatch.setattr(shutdown, "_runs_ray_here", lambda: True)
    monkeypatch.setattr(reaper, "ray_descendants", lambda proc: [psutil.Process(p.pid) for p in stand_ins])
    monkeypatch.setattr(ray, "shutdown", lambda: release.wait(120))  # hangs until released
    try:
        with caplog.at_level(logging.WARNING, logger="agentfly"):
            shutdown.stop_ray(timeout_s=1, grace_s=1)
        running = [psutil.pid_exists(p.pid) for p in stand_ins]  # stop_ray waited for them
    finally:
        release.set()
        for p in stand_ins:
            p.kill()
            p.wait()
    assert running == [False, False]  # killed, and reaped (each a `sleep 120`)
    pids = [p.pid for p in stand_ins]
    assert f"ray.shutdown() did not finish within 1 s: killing Ray's processes {pids}" in caplog.text


def test_sigterm_becomes_an_orderly_exit_once():
    """Inside :func:`sigterm_exits` SIGTERM raises ``SystemExit(143)`` where the main thread is,
    so ``finally`` blocks run; a second SIGTERM while those run is ignored; the handler that
    was there before is back afterwards."""
    from agentfly.core.shutdown import sigterm_exits

    before = signal.getsignal(signal.SIGTERM)
    cleaned = []
    with pytest.raises(SystemExit) as exited, sigterm_exits():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # interrupted: the handler raises here
            cleaned.append("not interrupted")
        finally:
            os.kill(os.getpid(), signal.SIGTERM)  # again, while cleaning up: said, not raised
            time.sleep(0.05)
            cleaned.append("cleaned up")
    assert exited.value.code == 143
    assert cleaned == ["cleaned up"]
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_sigterm_exit_python_drops_is_raised_again(caplog):
    """The handler can run where Python drops what it raises (an ``os.fork`` hook, as when Ray
    starts its processes; here a ``__del__``): the exit is raised again where it can propagate,
    and said once."""
    import logging

    from agentfly.core.shutdown import sigterm_exits

    class SignalledWhenDeleted:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGTERM)  # handled here, inside __del__

    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="agentfly"), pytest.raises(SystemExit) as exited, sigterm_exits():
        SignalledWhenDeleted()
        time.sleep(5)  # interrupted: the exit is raised again here
    assert exited.value.code == 143
    assert time.monotonic() - started < 4
    assert caplog.text.count("SIGTERM: stopping the run") == 1, caplog.text


def test_sigterm_during_a_fit_ends_it_in_order(task, tmp_path, caplog):
    """``agentfly fit`` (in this process, the in-process engine) signalled after its first
    training step: the step's checkpoint is kept, the run unwinds as ``SystemExit(143)`` saying
    why, and SIGTERM's handler is what it was."""
    import logging

    from agentfly.cli import main

    root, model = task
    run = tmp_path / "run"
    command = fit_args(root, model, run, 3, ["--trainer.callbacks+=tests.planted.Fail",
                                             "--trainer.callbacks.hook", "sigterm"])
    before = signal.getsignal(signal.SIGTERM)
    with caplog.at_level(logging.WARNING, logger="agentfly"), pytest.raises(SystemExit) as exited:
        main(command)
    assert exited.value.code == 143
    assert "SIGTERM: stopping the run" in caplog.text
    assert (run / "checkpoints" / "iter_000001.ckpt").exists()
    assert not (run / "checkpoints" / "iter_000002.ckpt").exists()
    assert signal.getsignal(signal.SIGTERM) is before


def test_sigterm_while_ray_starts_ends_the_run_in_order(monkeypatch, caplog):
    """``ray.init`` installs its own SIGTERM handler first thing (``sys.exit(15)``, nothing said)
    and takes seconds to start Ray. A start that is signalled there (``ray.init`` standing in:
    it sets the handler as Ray's does, then is signalled while it waits) still ends as at any
    other moment: ``SystemExit(143)``, said, and the handler that was there before is back."""
    import inspect
    import logging

    import ray
    from ray._private import worker

    from agentfly.core.shutdown import sigterm_exits
    from agentfly.rollout.engines.host import ensure_ray

    # what the stand-in does first is what this Ray's init does first
    assert "ray._private.utils.set_sigterm_handler(sigterm_handler)" in inspect.getsource(worker.init)

    def slow_start(*args, **kwargs):
        def sigterm_handler(signum, frame):  # Ray's own
            sys.exit(signum)

        ray._private.utils.set_sigterm_handler(sigterm_handler)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(10)  # starting Ray's processes: interrupted by the handler

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", slow_start)
    before = signal.getsignal(signal.SIGTERM)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="agentfly"), pytest.raises(SystemExit) as exited, sigterm_exits():
        ensure_ray()
    assert exited.value.code == 143
    assert "SIGTERM: stopping the run" in caplog.text
    assert time.monotonic() - started < 5
    assert signal.getsignal(signal.SIGTERM) is before


STOP_THAT_HANGS = """
import subprocess, sys, threading, time
from agentfly.core import shutdown

def hanging_cleanup():
    threading.Event().wait()  # a wait with no deadline, on the way out

shutdown.EXIT_BACKSTOP_S = float(sys.argv[2])
with shutdown.sigterm_exits(deadline_s=float(sys.argv[1])):
    child = subprocess.Popen(["sleep", "120"])
    try:  # the pid said inside: the SIGTERM that follows it always meets the cleanup
        print(child.pid, flush=True)
        time.sleep(100)
    finally:
        hanging_cleanup()
"""

GIL_NEVER_FREE = """
import re
def hanging_cleanup():
    re.match(r"(a+)+$", "a" * 64 + "b")  # matching in C for ever, the GIL held
"""


def run_stop_that_hangs(tmp_path, script: str, deadline_s: float, backstop_s: float):
    """Start ``script`` (:data:`STOP_THAT_HANGS`), SIGTERM it once it is inside its run; returns
    (the process, its `sleep` child's pid, stderr, seconds from the signal to its exit)."""
    err = tmp_path / "stderr.txt"
    with err.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", script, str(deadline_s), str(backstop_s)],
                                stdout=subprocess.PIPE, stderr=out, text=True)
    child = int(proc.stdout.readline())
    proc.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    try:
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if psutil.pid_exists(child):
            psutil.Process(child).kill()
    return proc, child, err.read_text(), time.monotonic() - signalled


def test_a_stop_that_hangs_after_sigterm_is_cut_at_the_deadline(tmp_path):
    """SIGTERM arms :func:`sigterm_exits`'s watchdog: a cleanup that never ends is cut short at
    ``deadline_s``, saying where each thread was; the process's children are killed; 143."""
    proc, child, said, took = run_stop_that_hangs(tmp_path, STOP_THAT_HANGS, 1, 60)
    assert proc.returncode == 143, said
    assert f"the run did not stop within 1 s of SIGTERM: killing its processes [{child}]" in said
    assert "in hanging_cleanup" in said  # the main thread's stack
    assert not psutil.pid_exists(child) or gone(psutil.Process(child))
    assert took < 30, said  # the deadline, then seconds at most (60: never)


def test_a_stop_that_holds_the_gil_ends_at_the_backstop(tmp_path):
    """A cleanup stuck in C with the GIL held, where the watchdog's thread cannot run:
    faulthandler dumps the stacks and ends the process (status 1) ``EXIT_BACKSTOP_S`` later."""
    script = STOP_THAT_HANGS.replace(
        'def hanging_cleanup():\n    threading.Event().wait()  # a wait with no deadline, on the way out\n',
        GIL_NEVER_FREE)
    assert "re.match" in script
    proc, _, said, took = run_stop_that_hangs(tmp_path, script, 3, 1)  # in the match long before 3 s
    assert proc.returncode == 1, said
    assert "Timeout" in said and "in hanging_cleanup" in said, said
    assert took < 30, said
