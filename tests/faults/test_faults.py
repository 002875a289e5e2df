"""Fault injection: the faults of issue 14, each tried on a real training run.

One run (``agentfly fit`` in a process of its own, tiny model, scripted turns) meets every fault
in user code at once (:mod:`tests.faults.plugin`): a tool that never returns, one that kills its
process, one that allocates 6 GiB, one that returns 100 MB, a reward that hangs, one beyond
float32's range and one that raises, a 100k-character question in the task file and, where
bubblewrap works, sandboxed code that tries to write outside and to kill its parent. It must
finish its iterations, count each failure by kind, keep within the deadlines it sets, leave no
process behind and never hold the 6 GiB. Then its ``last.ckpt`` is damaged and the same command
resumes from the newest intact iteration. Faults found before anything starts (a model path that
does not exist, a task file that is not UTF-8) are refused within seconds, naming what is wrong.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from agentfly.cli import main
from agentfly.models.tiny import build_tiny_model
from agentfly.rollout.execution.sandbox_isolation import bwrap_problem
from tests.fit_runs import processes_of

REPO = Path(__file__).resolve().parents[2]
ITERATIONS = 2
CHAINS = 4  # one group: the reward's four behaviours, one chain each
TOOL_TIMEOUT_S, REWARD_TIMEOUT_S = 2.0, 2.0  # fault_hang's and fault_reward's (tests/faults/plugin.py)


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    model = build_tiny_model(root / "model", max_position_embeddings=4096)
    rows = [{"question": f"What is {a}+{b}?", "answer": str(a + b)} for a, b in [(1, 2), (3, 4)]]
    rows.insert(1, {"question": "Why? " * 20_000, "answer": "0"})  # 100k characters
    (root / "train.json").write_text(json.dumps(rows))
    return root, model


def fit_command(root: Path, model: Path, run: Path, steps: int) -> list[str]:
    sandbox = bwrap_problem() is None
    tools = "fault_hang,fault_exit,fault_alloc,fault_huge,fault_ok,answer"
    return [
        sys.executable, "-m", "agentfly.cli", "fit",
        f"data.train_files={root / 'train.json'}",
        "data.train_batch_size=1",
        f"agent.init_config.model_name_or_path={model}",
        "agent.init_config.plugins=[tests.faults.plugin]",
        f"agent.init_config.tools=[{tools}{',code_interpreter' if sandbox else ''}]",
        "agent.init_config.template=qwen2.5",
        "agent.init_config.reward_name=fault_reward",
        "agent.init_config.max_model_len=4096",
        "agent.run_config.num_chains=4",
        "agent.run_config.max_turns=2",
        "agent.run_config.generation_config.max_tokens=400",
        "agent.run_config.workers.num_workers=2",
        "agent.run_config.workers.memory_mb=1024",
        "algorithm.adv_estimator=grpo",
        # every chain meets every fault: trained on as reward 0 and counted (the default would
        # re-sample them, then stop the run as none recovers; tests/rollout/test_failures.py)
        "algorithm.failed_chains=keep",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.rollout.name=fault_script",
        "actor_rollout_ref.rollout.num_engines=0",
        "trainer.logger=[csv]",
        f"trainer.total_training_steps={steps}",
        "trainer.save_freq=1",
        "trainer.test_freq=-1",
        "trainer.val_before_train=False",
        "trainer.resume_mode=auto",
        f"trainer.default_local_dir={run}",
    ]


def launch(command: list[str], run: Path, mark: str, timeout: float) -> tuple[subprocess.CompletedProcess, dict]:
    report = run.parent / f"{run.name}.{mark}.peak.json"
    env = {**os.environ, "PYTHONPATH": str(REPO), "WANDB_MODE": "offline", "FAULTS_MARK": mark,
           "FAULTS_REPORT": str(report), "FAULTS_SANDBOX": "1" if bwrap_problem() is None else "0"}
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    peak = json.loads(report.read_text()) if report.exists() else {}
    return done, peak


def survivors(mark: str) -> list[str]:
    """Processes (other than this one) whose environment carries ``FAULTS_MARK=mark``."""
    return [f"{p.pid}: {' '.join(p.cmdline())[:200]}" for p in processes_of(f"FAULTS_MARK={mark}")]


def survivors_within(mark: str, seconds: float) -> list[str]:
    deadline = time.monotonic() + seconds
    while (left := survivors(mark)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


BASHRC = Path.home() / ".bashrc"


def _read(path: Path) -> bytes | None:
    return path.read_bytes() if path.exists() else None


def iteration_rows(run: Path) -> list[dict[str, str]]:
    out = []
    for path in sorted((run / "metrics").glob("version_*/metrics.csv")):
        with path.open() as f:
            out += [r for r in csv.DictReader(f) if r.get("training/iteration")]
    return out


def test_a_run_meets_every_fault_in_user_code_and_finishes(task, tmp_path):
    root, model = task
    run, mark = tmp_path / "run", uuid.uuid4().hex
    bashrc = _read(BASHRC)
    start = time.monotonic()
    done, peak = launch(fit_command(root, model, run, ITERATIONS), run, mark, timeout=300)
    elapsed = time.monotonic() - start
    assert done.returncode == 0, done.stderr[-4000:]

    # training finished its iterations
    rows = iteration_rows(run)
    assert [float(r["training/iteration"]) for r in rows] == [1.0, 2.0]
    assert (run / "checkpoints" / f"iter_{ITERATIONS:06d}.ckpt").exists()

    # every failure counted by kind, every iteration: each chain calls each faulty tool once
    for r in rows:
        assert float(r["rollout/chains"]) == CHAINS
        assert float(r["rollout/failures/tool_kinds/timeout"]) == CHAINS  # fault_hang
        assert float(r["rollout/failures/tool_kinds/worker_died"]) == CHAINS  # fault_exit
        assert float(r["rollout/failures/tool_kinds/exception"]) == CHAINS  # fault_alloc: MemoryError
        assert float(r["rollout/failures/tool"]) == 3 * CHAINS  # fault_huge and fault_ok succeed
        assert float(r["rollout/failures/reward_kinds/timeout"]) == 1
        assert float(r["rollout/failures/reward_kinds/malformed"]) == 1  # 1e308
        assert float(r["rollout/failures/reward_kinds/exception"]) == 1
        assert float(r["rollout/failures/reward"]) == 3
        assert float(r["rollout/reward/mean"]) == pytest.approx(1 / CHAINS)  # the one sound chain
        assert float(r["data/train_prompts_dropped"]) == 1  # the 100k-character question
    assert "train.json row 2" in done.stderr  # the dropped row is named (rows count from 1)

    # within the deadlines set: a rollout waits on a hung call at most its deadline, so two
    # iterations take a few deadlines plus start-up, nowhere near a hang
    rollout_s = [float(r["timing/rollout_s"]) for r in rows]
    assert max(rollout_s) < 10 * (TOOL_TIMEOUT_S + REWARD_TIMEOUT_S), rollout_s
    assert elapsed < 240, elapsed

    # the 6 GiB were never the trainer's; nothing the run started is left
    assert peak and peak["peak_rss_kb"] < 3 * 2**20, peak  # < 3 GiB
    assert survivors_within(mark, 10) == []
    assert _read(BASHRC) == bashrc  # the sandboxed code could not write outside

    # a damaged last.ckpt: the same command resumes from the newest intact iteration
    ckpts = run / "checkpoints"
    last = ckpts / "last.ckpt"
    data = last.read_bytes()
    last.unlink()  # it may be a link to the iteration's file: damage a copy of its own
    last.write_bytes(data[: len(data) // 2])
    again, _ = launch(fit_command(root, model, run, ITERATIONS + 1), run, mark, timeout=300)
    assert again.returncode == 0, again.stderr[-4000:]
    assert "last.ckpt" in again.stderr and f"iter_{ITERATIONS:06d}.ckpt" in again.stderr
    assert [float(r["training/iteration"]) for r in iteration_rows(run)] == [1.0, 2.0, 3.0]
    assert survivors_within(mark, 10) == []
    assert all(any(d.iterdir()) for d in (run / "metrics").glob("version_*"))  # no empty folders


def in_process(command: list[str]) -> list[str]:
    """The CLI's arguments of a ``fit_command`` (for :func:`agentfly.cli.main` in this process)."""
    return command[command.index("fit"):]


def test_a_model_path_that_does_not_exist_is_refused_before_anything_starts(task, tmp_path, capsys):
    root, model = task
    missing = tmp_path / "no-such-model"
    command = [c.replace(str(model), str(missing)) for c in fit_command(root, model, tmp_path / "run", 1)]
    assert main(in_process(command)) == 2
    err = capsys.readouterr().err
    assert "actor_rollout_ref.model.path" in err and str(missing) in err
    assert "Traceback" not in err
    assert not (tmp_path / "run").exists()  # no engine, no folder


def test_a_task_file_that_is_not_utf8_is_named_with_its_line(task, tmp_path, capsys):
    root, model = task
    bad = tmp_path / "train.jsonl"
    bad.write_bytes(b'{"question": "fine", "answer": "1"}\n{"question": "caf\xe9", "answer": "2"}\n')
    command = [c if not c.startswith("data.train_files=") else f"data.train_files={bad}"
               for c in fit_command(root, model, tmp_path / "run", 1)]
    assert main(in_process(command)) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "line 2" in err, err[-2000:]
    assert "Traceback" not in err
