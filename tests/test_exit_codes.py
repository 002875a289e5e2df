"""What the user gave and a bug end differently: a config, data file or checkpoint that cannot be
used is one line naming it and exit status 2; anything else is a bug, shown with its traceback,
written to ``<run>/error.txt``, exit status 1 — a ``KeyError`` or ``ValueError`` raised inside
training included (they are not taken for config errors). Both commands, ``fit`` and ``sft``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agentfly.cli import main
from tests.fit_runs import fit_args, write_task

ROOT = Path(__file__).resolve().parents[1]
SFT_CONFIG = ROOT / "conf" / "examples" / "sft_demo.yaml"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    return write_task(tmp_path_factory.mktemp("exit_codes"), [(1, 2), (3, 4)])


def sft_args(run: Path, *extra: str) -> list[str]:
    return [
        "sft", "--config", str(SFT_CONFIG), "trainer.total_training_steps=1", "trainer.logger=[csv]",
        f"trainer.default_local_dir={run}", *extra,
    ]


@pytest.mark.parametrize("kind", ["KeyError", "ValueError"])
def test_a_bug_inside_fit_is_raised_with_its_traceback_and_noted(task, tmp_path, kind):
    root, model = task
    run = tmp_path / "run"
    with pytest.raises((KeyError, ValueError), match="planted bug") as raised:
        main(fit_args(root, model, run, 1, ["--trainer.callbacks+=tests.planted.Bug", f"--trainer.callbacks.kind={kind}"]))
    assert type(raised.value).__name__ == kind
    assert f"error: {kind}: " in (run / "error.txt").read_text()


def test_a_bug_is_exit_status_1_with_a_traceback_and_an_input_error_is_2_in_one_line(task, tmp_path):
    root, model = task
    run = tmp_path / "run"
    command = [sys.executable, "-m", "agentfly.cli", *fit_args(root, model, run, 1, ["--trainer.callbacks+=tests.planted.Bug"])]
    bug = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert bug.returncode == 1, bug.stderr[-2000:]
    assert "Traceback (most recent call last)" in bug.stderr and "KeyError: 'planted bug'" in bug.stderr
    missing = tmp_path / "no.ckpt"
    given = subprocess.run([*command[:3], *fit_args(root, model, run, 1), f"--ckpt_path={missing}"],
                           capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert given.returncode == 2, given.stderr[-2000:]
    assert f"--ckpt_path {missing} does not exist" in given.stderr and "Traceback" not in given.stderr


def test_fit_answers_a_missing_checkpoint_with_status_2(task, tmp_path, capsys):
    root, model = task
    assert main([*fit_args(root, model, tmp_path / "run", 1), f"--ckpt_path={tmp_path / 'no.ckpt'}"]) == 2
    assert "no.ckpt does not exist" in capsys.readouterr().err


def test_a_bug_inside_sft_is_raised_and_noted(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    run = tmp_path / "run"
    with pytest.raises(ValueError, match="planted bug"):
        main(sft_args(run, "--trainer.callbacks+=tests.planted.Bug", "--trainer.callbacks.kind=ValueError"))
    note = (run / "error.txt").read_text()
    assert "agentfly sft stopped on an error" in note and "error: ValueError: planted bug" in note


def test_sft_answers_input_errors_with_status_2(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main([*sft_args(tmp_path / "run"), f"--ckpt_path={tmp_path / 'no.ckpt'}"]) == 2
    assert "no.ckpt does not exist" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    assert main(sft_args(tmp_path / "run2", f"data.train_files=[{bad}]")) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "Traceback" not in err


def test_a_row_lacking_the_rewards_field_is_refused_at_start_up_naming_it(task, tmp_path, capsys):
    """The third training row has no ``answer`` (math_equal_reward_tool's): refused before any
    rollout, one line naming the split, the row (from 1), the field and the reward, exit 2."""
    import json

    root, model = task
    rows = [{"question": "What is 1+2?", "answer": "3"}, {"question": "What is 3+4?", "answer": "7"},
            {"question": "What is 5+6?"}]
    train = tmp_path / "train.json"
    train.write_text(json.dumps(rows))
    run = tmp_path / "run"
    args = fit_args(root, model, run, 1, [f"data.train_files={train}", "agent.init_config.max_model_len=2048"])
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "data.train_files: 1 of 3 rows cannot be scored, the first row 3 (counted from 1" in err
    assert "reward 'math_equal_reward_tool' requires field 'answer'" in err
    assert not (run / "trajectories" / "rollouts_rank0.jsonl").exists()
