"""code_reward: code extraction, assert and stdin/stdout cases, isolation of failing cases.

Each test runs twice: against a minimal stand-in sandbox (a plain subprocess, so the reward's own
logic is tested whatever the sandbox does) and against the real ``agentfly.rollout.execution.sandbox``
under bubblewrap (skipped, with the reason, where bubblewrap cannot run).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import types
from dataclasses import dataclass

import pytest

from agentfly.rollout.rewards import code_reward, code_reward_test, code_rewards, compute_reward
from agentfly.rollout.rewards.code_rewards import extract_code, outputs_match


@dataclass
class _FakeResult:
    stdout: str
    stderr: str
    returncode: int
    timed_out: bool = False
    truncated: bool = False


def _fake_run_code(
    code: str,
    *,
    timeout: float = 10.0,
    memory_mb: int = 1024,
    stdin: str | None = None,
    max_output_chars: int = 10000,
    isolation: str = "bwrap",
) -> _FakeResult:
    try:
        proc = subprocess.run(
            [sys.executable, "-I", "-c", code],
            input=stdin or "",
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return _FakeResult("", "", -9, timed_out=True)
    return _FakeResult(proc.stdout[:max_output_chars], proc.stderr, proc.returncode)


@pytest.fixture(params=["stand-in", "real"])
def sandbox(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "real":
        from agentfly.rollout.execution.sandbox_isolation import bwrap_problem

        if (problem := bwrap_problem()) is not None:
            pytest.skip(problem)
    else:
        fake = types.ModuleType("agentfly.rollout.execution.sandbox")
        fake.run_code = _fake_run_code
        monkeypatch.setitem(sys.modules, "agentfly.rollout.execution.sandbox", fake)
        monkeypatch.setattr(code_rewards, "use_bwrap", lambda isolation: True)
    return request.param


ADD = "def add(a, b):\n    return a + b\n"


def test_extract_code():
    text = (
        "First try:\n```python\nx = 1\n```\nFixed:\n```python\nx = 2\n```\nOutput:\n```text\n2\n```"
    )
    assert extract_code(text) == "x = 2\n"
    assert extract_code("```\nprint(1)\n```") == "print(1)\n"
    assert extract_code("```py\nprint(3)") == "print(3)"  # truncated response, no closing fence
    assert extract_code("print(4)") == "print(4)"


def test_outputs_match_ignores_whitespace_layout():
    assert outputs_match("1 2\n3\n\n", "1 2 3")
    assert not outputs_match("1 2", "1 2 3")


def test_two_of_three_asserts_pass(sandbox):
    prediction = f"Here is my solution:\n```python\n{ADD}```"
    row = {"test_list": ["assert add(1, 2) == 3", "assert add(2, 2) == 4", "assert add(0, 0) == 1"]}
    result = compute_reward("code_reward", prediction, row=row)
    assert not result.failed, result.error
    assert result.reward == pytest.approx(2 / 3)
    assert result.extras == {"pass_rate": pytest.approx(2 / 3), "all_passed": 0.0, "num_tests": 3.0}


def test_setup_code_and_tests_field(sandbox):
    prediction = "```python\ndef scale(x):\n    return x * FACTOR\n```"
    out = code_reward(
        prediction=prediction,
        tests=["assert scale(2) == 6", "assert scale(0) == 0"],
        test_setup_code="FACTOR = 3",
    )
    assert out["reward"] == 1.0 and out["all_passed"] == 1.0


def test_stdin_stdout_cases(sandbox):
    program = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    io = {"inputs": ["1 2\n", "5 5\n", "2 2\n", "10 -3\n"], "outputs": ["3\n", "10", "5\n", "7"]}
    # JSON string (APPS ``input_output``) and mapping (``test_cases``) are both read
    assert code_reward(prediction=program, input_output=json.dumps(io))["reward"] == 0.75
    assert code_reward(prediction=program, test_cases=io)["reward"] == 0.75


def test_long_expected_output_is_not_cut(sandbox):
    io = {"inputs": [""], "outputs": ["\n".join(map(str, range(5000)))]}  # ~24k characters
    program = "for i in range(5000):\n    print(i)"
    assert code_reward(prediction=program, test_cases=io)["reward"] == 1.0


def test_crashing_program_fails_its_cases(sandbox):
    io = {"inputs": ["1\n"], "outputs": ["1\n"]}
    assert (
        code_reward(prediction="print(input())\nraise SystemExit(3)", test_cases=io)["reward"]
        == 0.0
    )


def test_hanging_case_does_not_stop_the_others(sandbox, monkeypatch: pytest.MonkeyPatch):
    from agentfly.rollout.rewards import code_rewards

    monkeypatch.setattr(code_rewards, "CASE_TIMEOUT_S", 1.0)
    prediction = "```python\ndef f(x):\n    while x < 0:\n        pass\n    return x\n```"
    tests = [
        "assert f(-1) == -1",
        "assert f(1) == 1",
        "assert f(2) == 2",
        "import sys; sys.exit(1)",
    ]
    start = time.monotonic()
    out = code_reward(prediction=prediction, test_list=tests)
    assert out["reward"] == 0.5
    assert time.monotonic() - start < 6  # cases ran in parallel; the hung one was cut off


def test_no_test_cases_fails_safely(sandbox):
    result = compute_reward("code_reward", "print(1)", row={"answer": "1"})
    assert result.failed and result.reward == 0.0 and "needs test cases" in result.error


def test_call_based_cases_are_refused(sandbox):
    io = {"fn_name": "f", "inputs": [[1]], "outputs": [[1]]}
    result = compute_reward("code_reward", "def f(x): return x", row={"input_output": io})
    assert result.failed and "fn_name" in result.error


@pytest.mark.parametrize(
    ("prediction", "expected"),
    [
        ("print('Hello, World!')", 1.0),  # AgentFly's own test case
        ("print('Hello World'", 0.0),  # a syntax error
        ("import sys\nsys.exit(3)", 0.0),  # a non-zero exit
        ("Here:\n```python\nx = 1\nprint(x)\n```", 1.0),  # the fenced block is run
    ],
)
def test_code_reward_test_scores_a_clean_run(sandbox, prediction, expected):
    result = compute_reward("code_reward_test", prediction, row={})
    assert not result.failed, result.error
    assert result.reward == expected


def test_code_reward_test_times_out_a_hanging_program(sandbox, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(code_rewards, "CASE_TIMEOUT_S", 1.0)
    assert code_reward_test(prediction="while True:\n    pass") == 0.0


def test_code_reward_test_declares_its_sandbox():
    assert code_reward_test.sandbox_isolation == "bwrap"  # refused at compose where it cannot run
