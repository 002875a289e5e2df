"""QA rewards: SQuAD normalisation, token F1 and exact match, best over gold answers."""

from __future__ import annotations

import numpy as np
import pytest

from agentfly.rollout.rewards import compute_reward, qa_em_reward, qa_f1_reward
from agentfly.rollout.rewards.qa_rewards import normalize_answer


def test_normalize_answer():
    assert normalize_answer("  The  Eiffel-Tower, in PARIS! ") == "eiffeltower in paris"
    assert normalize_answer("An apple a day") == "apple day"
    assert normalize_answer("theater") == "theater"  # articles only as whole words


def test_f1_by_hand():
    # normalised: "cat sat" vs "cat sat down"; common 2 → precision 2/2, recall 2/3
    # F1 = 2 · 1 · (2/3) / (1 + 2/3) = 0.8
    out = qa_f1_reward(prediction="the cat sat", answer="a cat sat down")
    assert out["reward"] == pytest.approx(0.8)
    assert out["f1"] == pytest.approx(0.8)
    assert out["precision"] == pytest.approx(1.0)
    assert out["recall"] == pytest.approx(2 / 3)
    assert out["em"] == 0.0


def test_f1_repeated_tokens_counted_with_multiplicity():
    # "cat cat" vs "cat": common = min(2, 1) = 1 → precision 1/2, recall 1 → F1 = 2/3
    assert qa_f1_reward(prediction="cat cat", answer="cat")["f1"] == pytest.approx(2 / 3)


def test_f1_best_over_gold_list():
    out = qa_f1_reward(prediction="Barack Obama", answers=["Obama", "Barack Hussein Obama"])
    # vs "obama": P 1/2 R 1 → 2/3; vs "barack hussein obama": P 1 R 2/3 → 0.8
    assert out["f1"] == pytest.approx(0.8) and out["recall"] == pytest.approx(2 / 3)


def test_yes_no_only_match_exactly():
    assert qa_f1_reward(prediction="no", answer="no way")["f1"] == 0.0
    assert qa_f1_reward(prediction="Yes.", answer="yes")["f1"] == 1.0


@pytest.mark.parametrize(
    ("prediction", "answer", "answers", "expected"),
    [
        ("The Eiffel Tower.", "eiffel tower", None, 1.0),
        ("eiffel tower paris", "Eiffel Tower", None, 0.0),
        ("<answer>An Apple</answer>", None, ["pear", "apple"], 1.0),
        ("1,000", None, [1000, "1000"], 1.0),  # "1,000" → "1000" once punctuation goes
        ("Paris", None, np.array(["paris", "Paris, France"]), 1.0),  # parquet lists
        ("Paris", None, {"text": ["Paris"], "answer_start": [0]}, 1.0),  # SQuAD mapping
    ],
)
def test_exact_match(prediction, answer, answers, expected):
    assert qa_em_reward(prediction=prediction, answer=answer, answers=answers)["em"] == expected


def test_answer_tags_are_scored_not_the_reasoning():
    pred = "Thinking about films... <answer>Christopher Nolan</answer>"
    assert qa_f1_reward(prediction=pred, answer="Christopher Nolan")["reward"] == 1.0


def test_missing_gold_fails_safely():
    result = compute_reward("qa_f1_reward", "Paris", row={"question": "capital?"})
    assert result.failed and result.reward == 0.0 and "'answer' or 'answers'" in result.error


def test_through_compute_reward():
    result = compute_reward("qa_f1_reward", "the cat sat", row={"answer": "a cat sat down"})
    assert result.reward == pytest.approx(0.8) and result.extras["em"] == 0.0
