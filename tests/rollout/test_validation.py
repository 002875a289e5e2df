"""Validation: ``val_kwargs`` sampling with ``n`` chains, a greedy pass beside it, and exact means
when ranks validate different numbers of rows."""

from __future__ import annotations

import json

import pytest

from agentfly.cli import main
from agentfly.core.metric_sums import means as val_means
from tests.fit_runs import fit_args, rows


def test_val_means_weights_ranks_by_their_rows():
    # rank 0 validated one row (reward 1), rank 1 two rows (rewards 0, 0): the mean is 1/3,
    # not the mean of the ranks' means (1/2)
    parts = [{"val/a/reward": [1.0, 1.0]}, {"val/a/reward": [0.0, 2.0], "val/b/reward": [3.0, 4.0]}]
    assert val_means(parts) == pytest.approx({"val/a/reward": 1 / 3, "val/b/reward": 0.75})
    assert val_means([{}, {"val/a/accuracy": [0.0, 0.0]}]) == {}  # nothing counted, nothing logged


def _records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def _val_row(run):
    [row] = [r for r in rows(run) if r.get("val/val/reward")]
    return row


def test_sampled_validation_with_greedy_beside(task, tmp_path):
    root, model = task
    run = tmp_path / "run"
    kw = "actor_rollout_ref.rollout.val_kwargs"
    extra = ["trainer.val_before_train=True", f"{kw}.do_sample=True", f"{kw}.temperature=1.0",
             f"{kw}.n=2", f"{kw}.also_greedy=True"]
    assert main(fit_args(root, model, run, 1, extra)) == 0
    sampled = _records(run / "trajectories" / "val_trajectories_iter000000.jsonl")
    greedy = _records(run / "trajectories" / "val_greedy_trajectories_iter000000.jsonl")
    assert len(sampled) == 2 * 2 and len(greedy) == 2  # two val rows: n=2 sampled chains, one greedy
    row = _val_row(run)
    assert float(row["val/val/reward"]) == pytest.approx(sum(r["reward"] or 0 for r in sampled) / 4)
    assert float(row["val_greedy/val/reward"]) == pytest.approx(sum(r["reward"] or 0 for r in greedy) / 2)
    rate = sum(1 for r in sampled if r["tool_calls"]) / 4
    assert float(row["val/val/tool_call_rate"]) == pytest.approx(rate)


def test_greedy_validation_by_default(task, tmp_path):
    root, model = task
    run = tmp_path / "run"
    assert main(fit_args(root, model, run, 1, ["trainer.val_before_train=True"])) == 0
    traj = run / "trajectories"
    assert len(_records(traj / "val_trajectories_iter000000.jsonl")) == 2
    assert not list(traj.glob("val_greedy_*"))
    row = _val_row(run)
    assert not any(k.startswith("val_greedy/") and v for k, v in row.items())


def test_the_format_error_rate_counts_chains_with_a_malformed_or_unknown_call():
    """A chain counts once however many bad calls it made; an infrastructure failure (timeout)
    or a tool's own exception is not a format error."""
    from agentfly.core.trajectory import ToolCallRecord, Trajectory
    from agentfly.rollout.validation import add_val_sums

    def chain(*errors):
        t = Trajectory(prompt_ids=[1])
        t.tool_calls = [ToolCallRecord(name="calculator", arguments={}, observation="", ok=e is None, error=e)
                        for e in errors]
        return t

    trajs = [chain(None), chain("invalid_arguments", "invalid_arguments"), chain("unknown_tool"),
             chain("timeout"), chain("exception"), chain()]
    sums: dict = {}
    add_val_sums(sums, "val", trajs)
    assert val_means([sums])["val/val/format_error_rate"] == pytest.approx(2 / 6)


def test_the_success_rate_is_the_share_of_chains_whose_episode_was_won():
    """Only chains whose reward reports ``won`` count (3 of 4 here, 2 won); a reward without it
    logs no success rate."""
    from agentfly.core.trajectory import Trajectory
    from agentfly.rollout.validation import add_val_sums

    def chain(**extras):
        t = Trajectory(prompt_ids=[1])
        t.reward_extras = extras
        return t

    sums: dict = {}
    add_val_sums(sums, "val", [chain(won=1.0), chain(won=0.0), chain(won=1.0), chain(acc=1.0)])
    assert val_means([sums])["val/val/success_rate"] == pytest.approx(2 / 3)
    sums = {}
    add_val_sums(sums, "val", [chain(acc=1.0)])
    assert "val/val/success_rate" not in val_means([sums])
