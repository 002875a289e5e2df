"""Code reward: the fraction of the row's test cases the predicted program passes.

Test cases come in two shapes:

- assert statements (MBPP/HumanEval style): row field ``test_list`` or ``tests`` (a list of
  strings, or one string), plus optional ``test_setup_code`` run before each. A case passes when
  ``code + setup + assert`` exits 0 in the sandbox.
- stdin/stdout pairs (APPS/CodeContests style): row field ``test_cases`` or ``input_output``, a
  mapping (or its JSON string) with ``inputs`` and ``outputs`` lists. A case passes when the
  program exits 0 and its stdout equals the expected output token for token (whitespace
  differences ignored, as most judges do; no float tolerance).

Every case runs in its own sandboxed process (``agentfly.rollout.execution.sandbox.run_code``), at most
``MAX_PARALLEL_CASES`` at once, each under ``CASE_TIMEOUT_S``: one failing or hanging case cannot
stop the others. Call-based APPS problems (``fn_name``) are not supported (they raise).

``code_reward`` runs the cases under bubblewrap (``isolation="bwrap"``): where it cannot run, the
config is refused when composed and a call raises ``SandboxUnavailableError`` (a failed reward,
never a silent 0). ``code_reward_unsafe_rlimits_only`` is the same reward under the explicit
opt-in ``isolation="unsafe_rlimits_only"`` (resource limits only; it warns what is not
contained). The reward's ``sandbox_isolation`` attribute says which.

``code_reward_test`` (AgentFly's ``code_reward.py``) has no test cases: it scores 1.0 when the
predicted program runs to completion (exit 0 within ``CASE_TIMEOUT_S``) in the bubblewrap
sandbox, 0.0 when it fails. That is AgentFly's documented rule; its code scores an erroring
program 1.0 too, since its sandbox client returns the error text instead of raising.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentfly.rollout.execution.daemon_threads import THREADS
from agentfly.rollout.execution.sandbox_isolation import (
    Isolation,
    SandboxUnavailableError,
    use_bwrap,
)
from agentfly.rollout.rewards.base import reward

CASE_TIMEOUT_S = 10.0
"""Wall-clock limit of one test case (seconds)."""
MAX_PARALLEL_CASES = 8
"""Test cases of one prediction that run at once."""
CASE_MEMORY_MB = 1024
CODE_TIMEOUT_S = 300.0
"""Timeout of the whole reward call (seconds)."""

_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_PYTHON_TAGS = frozenset(("python", "py", "python3", "py3"))


@dataclass(frozen=True)
class CodeTestCase:
    """One test: a program to run and, for stdin/stdout cases, the expected output."""

    program: str
    stdin: str | None = None
    expected_stdout: str | None = None


def extract_code(text: str) -> str:
    """The last ```python fenced block of ``text``, else its last untagged block, else ``text``.

    An unclosed final fence (a truncated response) counts, up to the end of the text.
    """
    blocks = [(tag.lower(), body) for tag, body in _FENCE.findall(text)]
    for wanted in (lambda t: t in _PYTHON_TAGS, lambda t: t == ""):
        matching = [body for tag, body in blocks if wanted(tag)]
        if matching:
            return matching[-1]
    return text


def build_test_cases(
    code: str,
    *,
    test_list: Any = None,
    test_setup_code: str = "",
    test_cases: Any = None,
) -> list[CodeTestCase]:
    """The test cases of one row for program ``code``.

    Raises:
        ValueError: no test cases, a malformed ``test_cases`` value, or a call-based problem.
    """
    cases: list[CodeTestCase] = []
    if test_list is not None:
        asserts = [test_list] if isinstance(test_list, str) else list(test_list)
        setup = test_setup_code or ""
        cases += [CodeTestCase(f"{code}\n\n{setup}\n{test}\n") for test in asserts]
    if test_cases is not None:
        io = json.loads(test_cases) if isinstance(test_cases, str | bytes) else test_cases
        if not isinstance(io, Mapping) or "inputs" not in io or "outputs" not in io:
            raise ValueError("stdin/stdout test cases need a mapping with 'inputs' and 'outputs'")
        if io.get("fn_name"):
            raise ValueError("call-based test cases (fn_name) are not supported by code_reward")
        inputs, outputs = list(io["inputs"]), list(io["outputs"])
        if len(inputs) != len(outputs):
            raise ValueError(f"{len(inputs)} test inputs but {len(outputs)} outputs")
        cases += [
            CodeTestCase(code, stdin=_as_text(i), expected_stdout=_as_text(o))
            for i, o in zip(inputs, outputs, strict=True)
        ]
    if not cases:
        raise ValueError(
            "code_reward needs test cases: 'test_list'/'tests' (asserts) or "
            "'test_cases'/'input_output' (stdin/stdout)"
        )
    return cases


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, Sequence):  # some datasets store a case as a list of lines
        return "\n".join(map(str, value)) + "\n"
    return str(value)


def outputs_match(actual: str, expected: str) -> bool:
    """Token-wise equality: line breaks and runs of spaces don't matter."""
    return actual.split() == expected.split()


def run_test_case(
    case: CodeTestCase, timeout: float | None = None, isolation: Isolation = "bwrap"
) -> bool:
    """Whether ``case`` passes (within ``timeout``, default ``CASE_TIMEOUT_S``).

    Any failure of the program, or of the sandbox running it, counts as not passed.

    Raises:
        SandboxUnavailableError: ``isolation`` cannot run here.
    """
    from agentfly.rollout.execution.sandbox import run_code  # the sandbox is imported on first use

    limit = timeout or CASE_TIMEOUT_S
    # room for the expected output, so a long right answer is not cut (and so judged wrong)
    cap = max(10_000, 2 * len(case.expected_stdout or "") + 1024)
    try:
        result = run_code(
            case.program,
            timeout=limit,
            memory_mb=CASE_MEMORY_MB,
            stdin=case.stdin,
            max_output_chars=cap,
            isolation=isolation,
        )
    except SandboxUnavailableError:
        raise
    except Exception:
        return False
    if result.timed_out or result.returncode != 0:
        return False
    if case.expected_stdout is None:
        return True
    return len(result.stdout) < cap and outputs_match(result.stdout, case.expected_stdout)


def pass_fraction(
    cases: Sequence[CodeTestCase],
    max_parallel: int = MAX_PARALLEL_CASES,
    isolation: Isolation = "bwrap",
) -> float:
    """Fraction of ``cases`` that pass, running at most ``max_parallel`` at once.

    Raises:
        SandboxUnavailableError: ``isolation`` cannot run here (before any case runs).
    """
    use_bwrap(isolation)
    passed = THREADS.map(
        lambda case: run_test_case(case, isolation=isolation), cases, max_parallel=max_parallel
    )
    return sum(passed) / len(passed)


def score_code(
    prediction: str,
    *,
    test_list: Any,
    test_setup_code: str,
    test_cases: Any,
    isolation: Isolation,
) -> dict[str, float]:
    """``code_reward``'s metrics for ``prediction`` under ``isolation``."""
    code = extract_code(prediction)
    cases = build_test_cases(
        code, test_list=test_list, test_setup_code=test_setup_code, test_cases=test_cases
    )
    fraction = pass_fraction(cases, isolation=isolation)
    return {
        "reward": fraction,
        "pass_rate": fraction,
        "all_passed": float(fraction == 1.0),
        "num_tests": float(len(cases)),
    }


def _code_reward(isolation: str) -> Any:
    """The code reward under ``isolation``: the fraction of the row's test cases passed.

    Returns a function returning ``{"reward": fraction, "pass_rate": fraction, "all_passed":
    1.0 or 0.0, "num_tests": n}`` (raising ``SandboxUnavailableError`` where ``isolation`` cannot
    run), with ``sandbox_isolation`` set.
    """

    def score(
        prediction: str,
        test_list: Any = None,
        tests: Any = None,
        test_setup_code: str = "",
        test_cases: Any = None,
        input_output: Any = None,
    ) -> dict[str, float]:
        return score_code(
            prediction,
            test_list=test_list if test_list is not None else tests,
            test_setup_code=test_setup_code,
            test_cases=test_cases if test_cases is not None else input_output,
            isolation=isolation,
        )

    score.sandbox_isolation = isolation
    return score


# The test cases run in sandboxed processes of their own, each under its own limits (see
# run_test_case): the reward itself only drives them, in a thread of the trainer.
code_reward = reward(name="code_reward", timeout=CODE_TIMEOUT_S, runs_in="thread")(
    _code_reward("bwrap")
)
#: ``code_reward`` with resource limits only, nothing contained (the explicit opt-in)
code_reward_unsafe_rlimits_only = reward(
    name="code_reward_unsafe_rlimits_only", timeout=CODE_TIMEOUT_S, runs_in="thread"
)(_code_reward("unsafe_rlimits_only"))
#: the setting that opts a run's code reward out of containment
REWARD_OPT_IN_KEY = "agent.init_config.reward_name=code_reward_unsafe_rlimits_only"


@reward(name="code_reward_test", timeout=CODE_TIMEOUT_S, runs_in="thread")
def code_reward_test(prediction: str) -> float:
    """1.0 when the predicted program runs without error in the sandbox, else 0.0.

    The program is :func:`extract_code`'s (the whole prediction when it has no fenced block).

    Raises:
        SandboxUnavailableError: bubblewrap cannot run here.
    """
    use_bwrap("bwrap")
    return float(run_test_case(CodeTestCase(extract_code(prediction))))


code_reward_test.sandbox_isolation = "bwrap"
