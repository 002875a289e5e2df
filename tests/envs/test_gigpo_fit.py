"""`agentfly fit` with ``algorithm.adv_estimator=gigpo`` and ``algorithm.use_turn_rewards=true``
on a real environment process (tests/envs/fault_envs.py's CountingEnv: one point a step, the
observation ``step N``), one iteration on the tiny model, turns scripted (tests/envs/env_script.py).

One group of two chains: the long one acts three times, then stops ("done"); the short one acts
once, then stops. The reward is the episode's return (3 and 1), at the last turn; turn rewards
(1 a step) sit at each acting turn. gamma = 1, mean_norm, step_advantage_w = 1.

``turn_reward_mode=decompose`` (the default): the turn rewards split the reward (they add up to
it), so the last turn keeps the rest, 3 - 3 = 0 and 1 - 1 = 0:

    chain  turn rewards   step rewards (+ rest at the last)   returns       anchors
    long   1 1 1 0        1 1 1 0                             3 2 1 0       q, step 1, step 2, step 3
    short  1 0            1 0                                 1 0           q, step 1

- episode: sums 3 and 1 (each chain's reward, once), mean 2: +1, -1;
- steps: q {3, 1} -> +1, -1; "step 1" {2, 0} -> +1, -1 (both chains saw it after one step);
  "step 2" and "step 3" alone -> 0;
- tokens: long 2 2 1 1, short -2 -2: the batch's advantages span [-2, 2].

``add``: the turn rewards beside the whole reward, step rewards 1 1 1 3 and 1 1, returns
6 5 4 3 and 2 1: episode sums 6 and 2, +2 and -2; steps q {6, 2} and "step 1" {5, 1}, +2 and -2;
tokens long 4 4 2 2, short -4 -4: [-4, 4].
"""

from __future__ import annotations

import json

import pytest

from agentfly.cli import main
from agentfly.models.tiny import build_tiny_model
from tests.envs.env_script import SCRIPTS_FILE, action, env_fit, write_scripts
from tests.fit_runs import rows as metrics_rows


@pytest.mark.parametrize(("mode", "span"), [("decompose", 2.0), ("add", 4.0)])
def test_gigpo_trains_one_step_on_an_environment_with_turn_rewards(tmp_path, monkeypatch, mode, span):
    model = build_tiny_model(tmp_path / "model", max_position_embeddings=4096)
    row = {"question": "Count the steps."}
    data = tmp_path / "rows.json"
    data.write_text(json.dumps([row]))
    long, short = [action("a")] * 3 + ["done"], [action("a"), "done"]
    scripts = write_scripts(tmp_path / "scripts.json", {row["question"]: [long, short]})
    monkeypatch.setenv(SCRIPTS_FILE, str(scripts))
    run = tmp_path / "run"
    args = env_fit(run, model, data, ["counting_step"], "counting_return", max_turns=5, iterations=1,
                   extra=["algorithm.adv_estimator=gigpo", "algorithm.use_turn_rewards=true",
                          f"algorithm.turn_reward_mode={mode}"])
    assert main(args) == 0
    [record] = [json.loads(line) for line in (run / "trajectories" / "rollouts_rank0.jsonl").read_text().splitlines()]
    assert sorted(record["rewards"]) == [1.0, 3.0]
    assert sorted(record["turn_rewards"]) == [[1.0, 0.0], [1.0, 1.0, 1.0, 0.0]]
    [m] = [r for r in metrics_rows(run) if r.get("training/iteration")]
    assert float(m["training/turn_reward/mean"]) == pytest.approx(2.0)
    assert float(m["critic/advantages/max"]) == pytest.approx(span, abs=1e-5)
    assert float(m["critic/advantages/min"]) == pytest.approx(-span, abs=1e-5)
    # verl's return metrics: the scores (3 and 1), and the token rewards the estimator read
    assert float(m["critic/score/mean"]) == pytest.approx(2.0)
    assert float(m["critic/rewards/mean"]) == pytest.approx(2.0 if mode == "decompose" else 4.0)
