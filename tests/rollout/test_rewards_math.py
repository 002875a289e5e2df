"""Math rewards: answer extraction, math-verify equivalence, tool gating, format."""

from __future__ import annotations

import pytest

from agentfly.core.trajectory import ToolCallRecord, Trajectory
from agentfly.rollout.rewards import (
    compute_reward,
    math_equal_reward,
    math_equal_reward_think,
    math_equal_reward_tool,
    math_reward_format,
    math_reward_string_equal,
    math_reward_thought_with_tool,
    math_string_equal_reward_tool,
)
from agentfly.rollout.rewards.math_rewards import extract_answer, gold_answer, last_boxed


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "so \\boxed{\\frac{1}{2}} and later \\boxed{\\frac{3}{\\sqrt{4}}}.",
            "\\frac{3}{\\sqrt{4}}",
        ),
        ("\\fbox{7}", "7"),
        ("$\\boxed 5$", "5"),
        ("\\boxed{unclosed", None),
        ("no box here", None),
    ],
)
def test_last_boxed_balances_braces(text, expected):
    assert last_boxed(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("First 3, then \\boxed{12} and 99", "12"),
        ("We get 10 apples. The answer is 18. Done in 2 steps.", "18"),
        ("Answer: **$x^2$**", "x^2"),
        ("48 + 24 = 72\n#### 72", "72"),
        ("She has 1,234 coins and gave -3.5 away", "-3.5"),
        ("total 1,234", "1234"),
        ("nothing numeric", ""),
    ],
)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


def test_gold_answer_gsm8k_and_math_styles():
    solution = "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nAltogether 48+24 = 72.\n#### 72"
    assert gold_answer(solution) == "72"
    assert gold_answer("So the sum is \\boxed{\\frac{1}{2}}.") == "\\frac{1}{2}"
    assert gold_answer("#### 1,000") == "1000"
    assert gold_answer(65) == "65"


@pytest.mark.parametrize(
    ("prediction", "answer"),
    [
        ("The probability is \\boxed{\\frac{1}{2}}.", "0.5"),
        ("\\boxed{0.5}", "\\frac{1}{2}"),
        ("48 + 24 = 72, so the answer is 72.", "Natalia sold 48/2 = 24 clips...\n#### 72"),
        ("\\boxed{4}", "n = 4"),  # the seed's example row
        ("\\boxed{1+x^2}", "x^2+1"),
        ("\\boxed{\\dfrac{3}{4}}", "0.75"),
        ("The answer is 18 dollars.", "18"),
        ("\\boxed{1,000}", "1000"),
    ],
)
def test_math_equal_reward_right(prediction, answer):
    assert math_equal_reward(prediction=prediction, answer=answer) == {"reward": 1.0, "acc": 1.0}


@pytest.mark.parametrize(
    ("prediction", "answer"),
    [
        ("\\boxed{71}", "#### 72"),
        ("The answer is 0.25", "\\frac{1}{2}"),
        ("I don't know.", "72"),
        ("\\boxed{n=5}", "n = 4"),
        ("", "3"),
    ],
)
def test_math_equal_reward_wrong(prediction, answer):
    assert math_equal_reward(prediction=prediction, answer=answer) == {"reward": 0.0, "acc": 0.0}


def _trajectory(with_tool: bool, via_messages: bool = False) -> Trajectory:
    traj = Trajectory(prompt_ids=[1])
    if with_tool and via_messages:
        traj.messages = [
            {"role": "assistant", "content": "<tool_call>...</tool_call>"},
            {"role": "tool", "content": "72"},
        ]
    elif with_tool:
        traj.tool_calls = [
            ToolCallRecord(name="calculator", arguments={"expr": "48+24"}, observation="72")
        ]
    return traj


@pytest.mark.parametrize(
    ("with_tool", "via_messages", "prediction", "expected"),
    [
        (False, False, "\\boxed{72}", {"reward": 0.0, "acc": 1.0, "used_tool": 0.0}),
        (True, False, "\\boxed{70}", {"reward": 0.1, "acc": 0.0, "used_tool": 1.0}),
        (True, False, "\\boxed{72}", {"reward": 1.0, "acc": 1.0, "used_tool": 1.0}),
        (True, True, "\\boxed{72}", {"reward": 1.0, "acc": 1.0, "used_tool": 1.0}),
    ],
)
def test_math_equal_reward_tool(with_tool, via_messages, prediction, expected):
    traj = _trajectory(with_tool, via_messages)
    result = compute_reward("math_equal_reward_tool", prediction, traj, {"answer": "#### 72"})
    assert not result.failed
    assert result.metrics() == expected


def test_math_equal_reward_tool_without_trajectory():
    assert math_equal_reward_tool(prediction="72", answer="72")["reward"] == 0.0


@pytest.mark.parametrize(
    ("prediction", "answer", "expected"),
    [
        ("72", "72", 1.0),
        ("  \\boxed{72}. ", "72", 1.0),
        ("The answer is 72.", "#### 72", 1.0),
        ("n = 4", "n = 4", 1.0),
        ("\\boxed{0.5}", "\\frac{1}{2}", 0.0),  # strings, not math: no equivalence
        ("73", "72", 0.0),
    ],
)
def test_math_reward_string_equal(prediction, answer, expected):
    assert math_reward_string_equal(prediction=prediction, answer=answer)["reward"] == expected


@pytest.mark.parametrize(
    ("prediction", "expected"),
    [
        ("so \\boxed{\\frac{1}{2}}", {"reward": 1.0, "acc": 1.0, "format": 1.0}),
        ("so \\boxed{3}", {"reward": 0.1, "acc": 0.0, "format": 1.0}),
        ("the answer is 0.5", {"reward": 0.0, "acc": 1.0, "format": 0.0}),
        ("no idea", {"reward": 0.0, "acc": 0.0, "format": 0.0}),
    ],
)
def test_math_reward_format(prediction, expected):
    assert math_reward_format(prediction=prediction, answer="0.5") == expected


def test_math_rewards_safe_in_worker_thread():
    """math-verify's signal alarms would fail off the main thread; the safe call runs there."""
    result = compute_reward("math_equal_reward", "\\boxed{\\frac{1}{2}}", row={"answer": "0.5"})
    assert result.metrics() == {"reward": 1.0, "acc": 1.0} and not result.failed
    assert compute_reward("math_reward", "\\boxed{2}", row={"answer": "2"}).reward == 1.0  # alias


# AgentFly's shape of the ``trajectory`` argument: the chain's messages, a content a string or a
# list of text parts, one ``tool`` message per call.
def _react_chain(first_turn: str, last_turn: str, with_tool: bool = True) -> list[dict]:
    chain = [
        {"role": "user", "content": "48 + 24?"},
        {"role": "assistant", "content": first_turn},
        {"role": "tool", "content": "72"},
        {"role": "assistant", "content": [{"type": "text", "text": last_turn}]},
    ]
    return chain if with_tool else [m for m in chain if m["role"] != "tool"]


@pytest.mark.parametrize(
    ("first_turn", "with_tool", "prediction", "expected"),
    [
        # expected: (reward, acc, used_tool, thought)
        # tool call, every turn opens with "thought": 1 right, 0.1 wrong
        ("Thought: add.\nAction: calculator", True, "\\boxed{72}", (1.0, 1.0, 1.0, 1.0)),
        ("Thought: add.\nAction: calculator", True, "\\boxed{70}", (0.1, 0.0, 1.0, 1.0)),
        # stripped and lowercased before the check
        ("  thought: add.", True, "\\boxed{72}", (1.0, 1.0, 1.0, 1.0)),
        # a turn without the opening "Thought" zeroes even a right answer
        ("Let me add. Thought: ...", True, "\\boxed{72}", (0.0, 1.0, 1.0, 0.0)),
        # no tool call: 0 whatever the format
        ("Thought: add.", False, "\\boxed{72}", (0.0, 1.0, 0.0, 1.0)),
    ],
)
def test_math_reward_thought_with_tool(first_turn, with_tool, prediction, expected):
    chain = _react_chain(first_turn, "Thought: done. \\boxed{72}", with_tool)
    out = math_reward_thought_with_tool(prediction=prediction, answer="72", trajectory=chain)
    assert (out["reward"], out["acc"], out["used_tool"], out["thought"]) == expected


def test_math_reward_thought_with_tool_reads_a_trajectory():
    traj = _trajectory(with_tool=True)  # a recorded call, no tool message
    traj.messages = [{"role": "assistant", "content": "Thought: 48+24 is \\boxed{72}"}]
    result = compute_reward("math_reward_thought_with_tool", "\\boxed{72}", traj, {"answer": "72"})
    assert not result.failed and result.reward == 1.0


@pytest.mark.parametrize(
    ("first_turn", "last_turn", "with_tool", "prediction", "expected"),
    [
        ("<think>add</think> call", "<think>so</think> \\boxed{72}", True, "\\boxed{72}", 1.0),
        ("<think>add</think> call", "<think>so</think> \\boxed{70}", True, "\\boxed{70}", 0.1),
        # the template opened the block: text up to </think> is the thinking
        ("add</think> call", "so</think> \\boxed{72}", True, "\\boxed{72}", 1.0),
        # a block never closed: no thinking, so 0 though right
        ("<think>add call", "<think>so</think> \\boxed{72}", True, "\\boxed{72}", 0.0),
        # a turn without any block: 0
        ("<think>add</think> call", "\\boxed{72}", True, "\\boxed{72}", 0.0),
        # no tool call: 0
        ("<think>add</think>", "<think>so</think> \\boxed{72}", False, "\\boxed{72}", 0.0),
    ],
)
def test_math_equal_reward_think(first_turn, last_turn, with_tool, prediction, expected):
    chain = _react_chain(first_turn, last_turn, with_tool)
    out = math_equal_reward_think(prediction=prediction, answer="#### 72", trajectory=chain)
    assert out["reward"] == expected
    assert out["acc"] == (1.0 if "72" in prediction else 0.0)  # correctness, whatever the gate


@pytest.mark.parametrize(
    ("prediction", "answer", "with_tool", "expected"),
    [
        ("48 + 24 = 72", "72", True, 1.0),
        ("\\boxed{72}.", "72", True, 1.0),  # last digit run "72"
        ("72 apples, 3 left", "72", True, 0.1),  # last digit run "3"
        ("-3", "3", True, 1.0),  # digits only: the sign is not read
        ("2.5", "2.5", True, 0.1),  # last digit run "5" is not "2.5"
        ("no number", "72", True, 0.1),
        ("72", 72, True, 1.0),  # an integer gold compares as "72"
        ("72", "72", False, 0.0),  # no tool call
    ],
)
def test_math_string_equal_reward_tool(prediction, answer, with_tool, expected):
    chain = _react_chain("call", "done", with_tool)
    out = math_string_equal_reward_tool(prediction=prediction, answer=answer, trajectory=chain)
    assert out["reward"] == expected
