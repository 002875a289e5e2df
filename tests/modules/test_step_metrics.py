"""Each iteration's metrics row holds that iteration's values: a count logged in one iteration is
not written again in the next (Lightning re-sends a step metric that is not logged again)."""

from __future__ import annotations

import math

from agentfly.cli import main
from agentfly.core.step_metrics import StepMetrics
from tests.fit_runs import fit_args, rows, write_task


def test_absent_names_are_zero_counts_or_not_measured():
    step = StepMetrics()
    first = step.complete({"rollout/failed_chains/timeout": 2.0, "actor/pg_loss": 0.5})
    assert first == {"rollout/failed_chains/timeout": 2.0, "actor/pg_loss": 0.5}
    second = step.complete({"rollout/finish_reasons/stop": 4.0})
    assert second["rollout/finish_reasons/stop"] == 4.0
    assert second["rollout/failed_chains/timeout"] == 0.0  # a count that did not occur
    assert math.isnan(second["actor/pg_loss"])  # not measured this time
    third = step.complete({})
    assert third["rollout/finish_reasons/stop"] == 0.0


def test_a_failure_kind_of_one_iteration_is_zero_in_the_next(tmp_path):
    root, model = write_task(tmp_path / "task", [(1, 2), (3, 4)])
    run = tmp_path / "run"
    args = fit_args(root, model, run, 2, [
        "agent.init_config.plugins=[tests.modules.step_metrics_plugin]",
        "actor_rollout_ref.rollout.name=first_call_fails",
        "agent.run_config.max_turns=1",
    ])
    assert main(args) == 0
    iterations = [r for r in rows(run) if r.get("training/iteration")]
    assert [float(r["training/iteration"]) for r in iterations] == [1.0, 2.0]
    kind = [k for k in iterations[0] if k.startswith("rollout/failures/tool_kinds/")]
    assert len(kind) == 1, kind  # the unknown tool's kind, in iteration 1 only
    assert float(iterations[0][kind[0]]) == 4.0  # 2 prompts x 2 chains, one call each
    assert float(iterations[1][kind[0]]) == 0.0
    assert float(iterations[1]["rollout/failures/tool"]) == 0.0
