"""reasoning-gym as a data source: rows are reproducible by seed, JSON-safe, and scored by the
generator's own score_answer."""

from __future__ import annotations

import json

import pytest

from agentfly.envs.reasoning_gym import ReasoningGymEnv, reasoning_gym_rows, score_answer

pytest.importorskip("reasoning_gym", reason="needs reasoning-gym (pip install 'agentfly[envs]')")


def test_rows_are_the_same_for_the_same_seed_and_survive_json():
    rows = reasoning_gym_rows("basic_arithmetic", size=4, seed=7)
    assert rows == reasoning_gym_rows("basic_arithmetic", size=4, seed=7)
    assert rows != reasoning_gym_rows("basic_arithmetic", size=4, seed=8)
    assert json.loads(json.dumps(rows)) == rows
    assert all(r["dataset"] == "basic_arithmetic" and r["question"] for r in rows)


def test_the_generators_scorer_scores_answers():
    for row in reasoning_gym_rows("basic_arithmetic", size=3, seed=1):
        expression = row["metadata"]["expression"]
        assert score_answer(str(eval(expression)), row) == 1.0  # the arithmetic, computed here
        assert score_answer(str(eval(expression) + 1), row) == 0.0
    # a row read back from a file (tuples became lists) still scores
    (legs,) = json.loads(json.dumps(reasoning_gym_rows("leg_counting", size=1, seed=3)))
    assert score_answer(legs["answer"], legs) == 1.0


def test_the_environment_takes_one_answer():
    (row,) = reasoning_gym_rows("basic_arithmetic", size=1, seed=2)
    env = ReasoningGymEnv()
    observation, info = env.reset(row)
    assert observation == row["question"] == info["goal"]
    result = env.step(row["answer"])
    assert (result.reward, result.terminated) == (1.0, True)


def test_an_unknown_generator_lists_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown reasoning-gym dataset 'arithmetics'.*basic_arithmetic"):
        reasoning_gym_rows("arithmetics", size=1, seed=0)
