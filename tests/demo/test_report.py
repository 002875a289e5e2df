"""The end-of-run report on synthetic run directories whose figures are worked out by hand."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from agentfly.run.report import write_run_report

pytest.importorskip("matplotlib")

COLUMNS = [
    "actor/entropy",
    "launch",
    "rollout/failed_chains/reward_exception",
    "rollout/failed_chains/tool_timeout",
    "rollout/resampled_chains",
    "rollout/dropped_groups",
    "rollout/dropped_chains",
    "rollout/failures/tool_kinds/invalid_arguments",
    "training/no_signal_iterations",
    "training/reward/mean",
    "rollout/accuracy",
    "step",
    "timing/iteration_s",
    "training/iteration",
    "val/val/accuracy",
    "val/val/reward",
    "val/val/tool_call_rate",
    "val_greedy/val/accuracy",
    "val_greedy/val/reward",
    "val_greedy/val/tool_call_rate",
]


def write_csv(run: Path, version: int, rows: list[dict[str, float]]) -> None:
    """One launch's metrics as Lightning's CSVLogger writes them (every column, blanks)."""
    path = run / "metrics" / f"version_{version}" / "metrics.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: row.get(k, "") for k in COLUMNS})


def train_row(iteration: int, seconds: float, score: float, entropy: float) -> dict[str, float]:
    return {
        "training/iteration": iteration,
        "step": iteration - 1,
        "timing/iteration_s": seconds,
        "training/reward/mean": score,
        "rollout/accuracy": score,
        "actor/entropy": entropy,
    }


def val_row(step: int, acc: float, greedy_acc: float, tools: float = 1.0) -> dict[str, float]:
    # math_equal_reward_tool: 1.0 when right, 0.1 when a tool was called but the answer is wrong
    reward, greedy_reward = acc + 0.1 * (1 - acc), greedy_acc + 0.1 * (1 - greedy_acc)
    return {
        "step": step,
        "val/val/accuracy": acc,
        "val/val/reward": reward,
        "val/val/tool_call_rate": tools,
        "val_greedy/val/accuracy": greedy_acc,
        "val_greedy/val/reward": greedy_reward,
        "val_greedy/val/tool_call_rate": tools,
    }


def record(question: str, answer: str, reply: str, reward: float) -> dict:
    return {
        "row": {"question": question, "answer": answer},
        "messages": [
            {"role": "user", "content": question},
            {
                "role": "assistant",
                "content": f'<tool_call>{{"name": "calculator", "arguments": {{"expression": "{question}"}}}}</tool_call>',
            },
            {"role": "tool", "content": answer},
            {
                "role": "assistant",
                "content": f'<tool_call>{{"name": "answer", "arguments": {{"answer": "{reply}"}}}}</tool_call>',
            },
        ],
        "reward": reward,
        "response_text": "ignored when messages are present",
    }


def write_jsonl(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


@pytest.fixture(params=["one_file", "a_file_per_launch"])
def resumed_run(tmp_path: Path, request) -> Path:
    """Validation at 0; iterations 1-2; a kill; a resumed launch runs iteration 3 and validates.
    As this agentfly writes it (the resumed launch continues the file, its rows ``launch`` 2),
    and as a file per launch (an earlier agentfly's, or a fresh launch into the folder)."""
    run = tmp_path / "run"
    first = [val_row(0, 0.25, 0.5), train_row(1, 2.0, 0.3, 0.4), train_row(2, 3.0, 0.4, 0.3)]
    second = [train_row(3, 4.0, 0.6, 0.2), val_row(2, 0.75, 1.0)]
    if request.param == "one_file":
        write_csv(run, 0, [{**r, "launch": 1} for r in first] + [{**r, "launch": 2} for r in second])
    else:
        write_csv(run, 0, first)
        write_csv(run, 1, second)
    qs = [(f"{a}*{a + 1}", str(a * (a + 1))) for a in (12, 34, 56, 78)]
    before = [record(q, a, "1", 0.1) for q, a in qs]
    after = [record(q, a, a, 1.0) for q, a in reversed(qs[1:])]  # other order; the first row absent
    write_jsonl(run / "trajectories" / "val_trajectories_iter000000.jsonl", before)
    write_jsonl(run / "trajectories" / "val_trajectories_iter000003.jsonl", after)
    return run


def test_before_after_time_and_files_across_launches(resumed_run: Path):
    out = write_run_report(resumed_run, elapsed_s=30.0, console=False)
    assert out["iterations"] == 3
    assert out["training_s"] == pytest.approx(2.0 + 3.0 + 4.0)
    assert out["s_per_iteration"] == pytest.approx(9.0 / 3)
    assert out["elapsed_s"] == 30.0
    # the second launch's validation row comes after its iteration 3 (its step, 2, is Lightning's)
    assert (out["before_iteration"], out["after_iteration"]) == (0, 3)
    table = {r["metric"]: r for r in out["table"]}
    assert table["accuracy"]["val"] == pytest.approx((0.25, 0.75))
    assert table["accuracy"]["val_greedy"] == pytest.approx((0.5, 1.0))
    # reward = accuracy + 0.1 x (1 - accuracy): 0.25 + 0.1 * 0.75, 0.75 + 0.1 * 0.25
    assert table["reward"]["val"] == pytest.approx((0.325, 0.775))
    assert table["tool_call_rate"]["val"] == (1.0, 1.0)
    assert out["after"]["val_greedy/val/accuracy"] == 1.0
    assert Path(out["plot"]).name == "training_curves.png" and Path(out["plot"]).stat().st_size > 0
    text = (resumed_run / "report.md").read_text()
    assert "| val | accuracy | 0.250 → 0.750 | 0.500 → 1.000 |" in text
    assert "9 s (3.00 s/iteration)" in text
    assert any("KL" in m for m in out["missing"])  # no KL column: said, not plotted


def test_a_resumed_runs_times_add_up(resumed_run: Path):
    """The resumed launch took 5 s in all, 4 s of them its one iteration (3); the run trained 9 s
    over its two launches. Each "in all" holds the training said beside it."""
    out = write_run_report(resumed_run, elapsed_s=5.0, console=False)
    line = (resumed_run / "report.md").read_text().splitlines()[2]
    for clause in line.split(";"):
        training, in_all = re.search(r"training (\d+) s", clause), re.search(r"(\d+) s in all", clause)
        if in_all:
            assert training and int(training[1]) <= int(in_all[1]), line
    assert "training 9 s (3.00 s/iteration) over 2 launches" in line
    assert "this launch: 1 iteration, training 4 s, 5 s in all" in line
    assert (out["launches"], out["launch_iterations"], out["launch_training_s"]) == (2, 1, 4.0)


def test_the_failures_of_the_run_are_in_the_report_and_on_the_console(tmp_path: Path, capsys):
    """A reward that raised on one group's 4 chains in iterations 1 and 2 (not re-run, the group
    dropped), a tool that timed out once and was re-run, the model's malformed calls; the counts
    are the CSV's, summed over the iterations, under the CSV's names."""
    run = tmp_path / "run"
    fail = {"rollout/failed_chains/reward_exception": 4, "rollout/dropped_groups": 1, "rollout/dropped_chains": 4}
    write_csv(run, 0, [
        val_row(0, 0.25, 0.5),
        {**train_row(1, 2.0, 0.3, 0.4), **fail, "rollout/failures/tool_kinds/invalid_arguments": 2,
         "training/no_signal_iterations": 1},
        {**train_row(2, 3.0, 0.4, 0.3), **fail, "rollout/failed_chains/tool_timeout": 1,
         "rollout/resampled_chains": 1, "training/no_signal_iterations": 1},
        val_row(1, 0.5, 0.75),
    ])
    out = write_run_report(run, console=True)
    assert out["failures"] == {
        "chains": {"reward_exception": 8, "tool_timeout": 1}, "resampled": 1,
        "dropped_groups": 2, "dropped_chains": 8, "tool_errors": {"invalid_arguments": 2},
        "no_signal_iterations": 1,
    }
    said = capsys.readouterr().out
    text = (run / "report.md").read_text()
    for where in (said, text):
        assert "chains failed (rollout/failed_chains/*): reward_exception 8, tool_timeout 1; re-run 1, groups dropped 2 (8 training chains)" in where
        assert "(rollout/failures/tool_kinds/*): invalid_arguments 2" in where
        assert "iterations with no learning signal (every group's rewards equal): 1" in where


def test_a_run_without_failures_says_so(resumed_run: Path):
    write_run_report(resumed_run, console=False)
    assert "- chains failed (rollout/failed_chains/*): none" in (resumed_run / "report.md").read_text()


def test_samples_are_the_same_questions_before_and_after(resumed_run: Path):
    out = write_run_report(resumed_run, console=False)
    # the first question has no chain after training; the next three, in the order of "before"
    assert [s["question"] for s in out["samples"]] == ["34*35", "56*57", "78*79"]
    first = out["samples"][0]
    assert (first["before"]["reward"], first["after"]["reward"]) == (0.1, 1.0)
    assert first["after"]["text"].splitlines()[-1].endswith('{"answer": "1190"}}</tool_call>')
    # the question itself (the user turn) is not repeated in the chain's text
    assert first["before"]["text"].splitlines()[1] == "tool: 1190"
    assert "## Sample 1: 34*35 (answer 1190)" in (resumed_run / "report.md").read_text()


def test_console_output_names_the_figures(resumed_run: Path, capsys):
    write_run_report(resumed_run, console=True)
    out = capsys.readouterr().out
    assert "0.250 → 0.750" in out and "34*35" in out and "training_curves.png" in out


def test_empty_run_directory_says_what_is_missing(tmp_path: Path):
    out = write_run_report(tmp_path, console=False)
    assert out["iterations"] == 0 and out["training_s"] is None and out["table"] == []
    assert out["plot"] is None and out["samples"] == []
    assert any("no training metrics" in m for m in out["missing"])
    assert any("no validation metrics" in m for m in out["missing"])
    assert any("no validation trajectories" in m for m in out["missing"])
    assert "Missing:" in (tmp_path / "report.md").read_text()


def test_training_without_validation_still_plots(tmp_path: Path):
    write_csv(tmp_path, 0, [train_row(1, 1.5, 0.2, 0.5), train_row(2, 2.5, 0.3, 0.4)])
    out = write_run_report(tmp_path, console=False)
    assert out["iterations"] == 2 and out["training_s"] == pytest.approx(4.0)
    assert out["before_iteration"] is None and out["table"] == []
    assert out["plot"] is not None
    assert any("no validation metrics" in m for m in out["missing"])


def test_one_validation_only_and_greedy_absent(tmp_path: Path):
    row = {
        "step": 0,
        "val/val/accuracy": 0.5,
        "val/val/reward": 0.55,
        "val/val/tool_call_rate": 1.0,
    }
    write_csv(tmp_path, 0, [row, train_row(1, 1.0, 0.5, 0.3)])
    out = write_run_report(tmp_path, console=False)
    assert (out["before_iteration"], out["after_iteration"]) == (0, 0)
    accuracy = next(r for r in out["table"] if r["metric"] == "accuracy")
    assert accuracy["val"] == (0.5, 0.5) and accuracy["val_greedy"] == (None, None)
    assert (
        "| val | accuracy | 0.500 → 0.500 |\n" in (tmp_path / "report.md").read_text()
    )  # one column
    assert any("one validation only" in m for m in out["missing"])
    assert any("no greedy validation" in m for m in out["missing"])


def test_launches_are_read_in_numeric_version_order(tmp_path: Path):
    """version_10 comes after version_2 (a run resumed ten times)."""
    for v in range(11):
        rows = [train_row(v + 1, 1.0, 0.1 * v, 0.5)]
        if v in (0, 10):  # validation first: it belongs to the previous launch's last iteration
            rows.insert(0, val_row(v, 0.1 if v == 0 else 0.9, 0.2))
        write_csv(tmp_path, v, rows)
    out = write_run_report(tmp_path, console=False)
    # read as version_0, 1, 10, 2, ... the last validation would land on iteration 2
    assert (out["before_iteration"], out["after_iteration"]) == (0, 10)
    accuracy = next(r for r in out["table"] if r["metric"] == "accuracy")
    assert accuracy["val"] == pytest.approx((0.1, 0.9))


def test_a_line_cut_short_by_a_kill_is_skipped(tmp_path: Path):
    write_csv(
        tmp_path, 0, [val_row(0, 0.2, 0.4), train_row(1, 1.0, 0.2, 0.5), val_row(0, 0.6, 0.8)]
    )
    traj = tmp_path / "trajectories"
    write_jsonl(traj / "val_trajectories_iter000000.jsonl", [record("2*3", "6", "5", 0.1)])
    write_jsonl(traj / "val_trajectories_iter000001.jsonl", [record("2*3", "6", "6", 1.0)])
    with (traj / "val_trajectories_iter000001.jsonl").open("a") as f:
        f.write('{"row": {"question": "4*')
    out = write_run_report(tmp_path, console=False)
    assert [s["question"] for s in out["samples"]] == ["2*3"]
