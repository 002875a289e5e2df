"""A fit whose chains hold a ScienceWorld environment (a Java process) and a chess one (a
Stockfish process), stopped by SIGTERM and by SIGKILL while its chains act: no process of the
run outlives it. The run's processes are found by a marker in their environment, which every
descendant inherits (the environment processes, Java, Stockfish, the tool workers)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from agentfly.envs.chess import DEMO_PUZZLES
from agentfly.models.tiny import build_tiny_model
from tests.envs.conftest import needs, requires_java, requires_stockfish
from tests.envs.env_script import SCRIPTS_FILE, env_fit, write_scripts
from tests.fit_runs import processes_of

REPO = Path(__file__).resolve().parents[2]
QUESTION = "Look at the board again and again."


def names(procs) -> list[str]:
    out = []
    for proc in procs:
        try:
            out.append(f"{proc.pid} {' '.join(proc.cmdline())[:150]}")
        except Exception:  # gone meanwhile
            continue
    return out


def launch(tmp_path: Path, model: Path, marker: str) -> tuple[subprocess.Popen, Path]:
    row = {**DEMO_PUZZLES[0], "question": QUESTION, "task_name": "lifespan-longest-lived", "variation": 0}
    data = tmp_path / "rows.json"
    data.write_text(json.dumps([row]))
    # every chain asks for the board, 0.3 s a turn, for 200 turns: still acting when stopped
    scripts = write_scripts(tmp_path / "scripts.json", {QUESTION: [["Action: chess_get_state\nInput: {}"]]}, delay_s=0.3)
    args = env_fit(tmp_path / "run", model, data, ["chess_get_state", "scienceworld_explorer"], "chess_puzzle_reward_simple",
                   agent="react", template="qwen2.5", max_turns=200, chains=1,
                   extra=["agent.init_config.tool_config.chess_get_state.max_steps=null"])
    key, value = marker.split("=")
    log = tmp_path / "fit.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "agentfly.cli", *args], cwd=REPO, stdout=out,
                                stderr=subprocess.STDOUT, env={**os.environ, key: value, SCRIPTS_FILE: str(scripts)})
    return proc, log


@requires_java
@requires_stockfish
def test_a_trainer_stopped_by_sigterm_or_sigkill_leaves_no_java_or_engine_process(tmp_path):
    needs("scienceworld")
    needs("chess")
    model = build_tiny_model(tmp_path / "model", max_position_embeddings=4096)  # env_fit's context
    runs = {}  # two runs at once: one gets SIGTERM, the other SIGKILL
    for how in (signal.SIGTERM, signal.SIGKILL):
        folder = tmp_path / how.name
        folder.mkdir()
        marker = f"AGENTFLY_ENV_ORPHANS={uuid.uuid4().hex}"
        runs[how] = (*launch(folder, model, marker), marker)
    try:
        deadline = time.monotonic() + 360  # two runs start at once: slow on a loaded machine
        for proc, log, marker in runs.values():
            while not all(any(p in n for n in names(processes_of(marker))) for p in ("java", "stockfish")):
                assert proc.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline, f"no Java and Stockfish within 360 s: {names(processes_of(marker))}"
                time.sleep(0.2)
        time.sleep(1.0)  # the chains are acting
        for how, (proc, _, _) in runs.items():
            proc.send_signal(how)
        for proc, _, _ in runs.values():
            proc.wait(timeout=90)
    finally:
        for proc, _, _ in runs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    sigterm, log, _ = runs[signal.SIGTERM]
    assert sigterm.returncode == 143, log.read_text()[-3000:]
    deadline = time.monotonic() + 15
    for how, (_, log, marker) in runs.items():
        while (left := names(processes_of(marker))) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert left == [], (how.name, left, log.read_text()[-3000:])
