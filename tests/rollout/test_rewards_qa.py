"""QA rewards: SQuAD normalisation, token F1 and exact match, best over gold answers."""

from __future__ import annotations

import numpy as np
import pytest

from agentfly.core.trajectory import ToolCallRecord, Trajectory
from agentfly.rollout.rewards import (
    compute_reward,
    qa_em_format_reward,
    qa_em_reward,
    qa_em_reward_tool_call,
    qa_f1_reward,
    qa_f1_reward_tool,
)
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
    assert result.failed and result.reward == 0.0
    assert "'answer', 'answers' or 'golden_answers'" in result.error


def test_through_compute_reward():
    result = compute_reward("qa_f1_reward", "the cat sat", row={"answer": "a cat sat down"})
    assert result.reward == pytest.approx(0.8) and result.extras["em"] == 0.0


@pytest.mark.parametrize(
    "golden_answers",
    [["Paris", "City of Light"], "Paris", np.array(["Paris"])],  # AgentFly's rows; parquet
)
def test_golden_answers_field(golden_answers):
    assert qa_em_reward(prediction="paris.", golden_answers=golden_answers)["em"] == 1.0
    result = compute_reward("qa_f1_reward", "Paris", row={"golden_answers": golden_answers})
    assert not result.failed and result.reward == 1.0


# AgentFly's shape of the ``trajectory`` argument: the chain's messages, one ``tool`` message per
# call, the answer tool's included.
def _search_chain(*turns: str, tool_messages: int = 1) -> list[dict]:
    chain: list[dict] = [{"role": "user", "content": "Capital of France?"}]
    for turn in turns[:-1]:
        chain.append({"role": "assistant", "content": turn})
        chain.extend({"role": "tool", "content": "doc"} for _ in range(tool_messages))
    chain.append({"role": "assistant", "content": turns[-1]})
    return chain


@pytest.mark.parametrize(("tool_messages", "expected"), [(0, 0.0), (1, 0.0), (2, 2 / 3)])
def test_qa_f1_reward_tool_needs_two_calls(tool_messages, expected):
    # "obama" vs "barack obama": common 1, precision 1/1, recall 1/2 → F1 = 2·½/(3/2) = 2/3
    chain = _search_chain("search", "answer", tool_messages=tool_messages)
    out = qa_f1_reward_tool(prediction="Obama", answer="Barack Obama", trajectory=chain)
    assert out["reward"] == pytest.approx(expected)
    assert out["recall"] == pytest.approx(0.5 if expected else 0.0)


def test_qa_f1_reward_tool_counts_a_trajectorys_recorded_calls():
    # agentfly's loop records the answer call but writes no tool message for it: 2 calls
    traj = Trajectory(
        prompt_ids=[1],
        num_turns=2,
        tool_calls=[
            ToolCallRecord("search", {"query": "obama"}, "doc", turn=0),
            ToolCallRecord("answer", {"answer": "Obama"}, "Obama", turn=1),
        ],
    )
    row = {"golden_answers": ["Barack Obama"]}
    assert compute_reward("qa_f1_reward_tool", "Obama", traj, row).reward == pytest.approx(2 / 3)
    traj.tool_calls = traj.tool_calls[1:]  # the answer alone
    assert compute_reward("qa_f1_reward_tool", "Obama", traj, row).reward == 0.0


WELL_FORMED = ("<think>search it</think><search>France</search>", "<think>found</think>")


@pytest.mark.parametrize(
    ("turns", "tool_messages", "prediction", "expected"),
    [
        # expected: (reward, em, f1, fmt, fmt_think, fmt_answer_tags, fmt_tool)
        (WELL_FORMED, 1, "<answer>Paris</answer>", (1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0)),
        # well-formed, wrong: 0.1; "paris france" vs "paris": P 1/2, R 1 → F1 2/3
        (WELL_FORMED, 1, "<answer>Paris France</answer>", (0.1, 0.0, 2 / 3, 1.0, 1.0, 1.0, 1.0)),
        # right but no answer tags: 0
        (WELL_FORMED, 1, "Paris", (0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0)),
        # an earlier turn without <think>: 0
        (("<search>France</search>", "x"), 1, "<answer>Paris</answer>", (0, 1, 1, 0, 0, 1, 1)),
        # the last turn need not think
        (("<think>s</think>", "no think"), 1, "<answer>Paris</answer>", (1, 1, 1, 1, 1, 1, 1)),
        # no tool call: 0
        (WELL_FORMED, 0, "<answer>Paris</answer>", (0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0)),
    ],
)
def test_qa_em_format_reward(turns, tool_messages, prediction, expected):
    chain = _search_chain(*turns, tool_messages=tool_messages)
    chain[-1]["content"] += prediction
    out = qa_em_format_reward(
        prediction=prediction, golden_answers=["Paris", "City of Light"], trajectory=chain
    )
    keys = ("reward", "em", "f1", "fmt", "fmt_think", "fmt_answer_tags", "fmt_tool")
    assert tuple(out[k] for k in keys) == pytest.approx(expected)


def _answer_call(arguments: object) -> dict:
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"type": "function", "function": {"name": "answer", "arguments": arguments}}
        ],
    }


@pytest.mark.parametrize(
    ("last_message", "expected"),
    [
        # expected: (reward, em, has_tool_call_answer); the final response "Lyon" is not read
        (_answer_call({"answer": "Paris"}), (1.0, 1.0, 1.0)),
        (_answer_call('{"answer": "Paris"}'), (1.0, 1.0, 1.0)),  # OpenAI's JSON-string arguments
        ({"role": "tool", "content": [{"type": "text", "text": "Paris"}]}, (1.0, 1.0, 1.0)),
        # no answer through a tool: the final response is scored
        ({"role": "assistant", "content": "Lyon"}, (0.0, 0.0, 0.0)),
        (_answer_call({"query": "Paris"}), (0.0, 0.0, 0.0)),
    ],
)
def test_qa_em_reward_tool_call_reads_the_answer_tool(last_message, expected):
    chain = [*_search_chain("search", "x"), last_message]
    out = qa_em_reward_tool_call(prediction="Lyon", golden_answers=["Paris"], trajectory=chain)
    assert (out["reward"], out["em"], out["has_tool_call_answer"]) == expected
    assert out["has_tool_calling"] == 1.0


def test_qa_em_reward_tool_call_on_a_trajectory():
    traj = Trajectory(
        prompt_ids=[1],
        num_turns=2,
        tool_calls=[
            ToolCallRecord("search", {"query": "france"}, "doc", turn=0),
            ToolCallRecord("answer", {"answer": "Paris"}, "Paris", turn=1),
        ],
    )
    out = qa_em_reward_tool_call(prediction="Lyon", golden_answers="Paris", trajectory=traj)
    assert (out["reward"], out["has_tool_call_answer"]) == (1.0, 1.0)
    # the last call came a turn before the end: the final response is scored;
    # "answer is paris" vs "paris": P 1/3, R 1 → F1 = 2·⅓/(4/3) = 0.5
    traj.num_turns = 3
    out = qa_em_reward_tool_call(
        prediction="The answer is Paris", golden_answers="Paris", trajectory=traj
    )
    assert (out["reward"], out["has_tool_call_answer"]) == (0.0, 0.0)
    assert out["f1"] == pytest.approx(0.5)
