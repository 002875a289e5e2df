"""The calculator: exact arithmetic, bounded sizes, no eval, one-unknown equations.

Expected values are worked out by hand in the comments.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from agentfly.rollout.tools import run_tool_call
from agentfly.rollout.tools.calculator import CalculatorError, calculate


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("12345*6789", "83810205"),  # 12345*6789 = 12345*6000 + 12345*789 = 74070000 + 9740205
        ("(3 + 4) * 12", "84"),
        ("0.1 + 0.2", "0.3"),  # exact decimals, not 0.30000000000000004
        ("1/3 + 1/6", "0.5"),  # 2/6 + 1/6 = 3/6 = 1/2
        ("1/3", "1/3 ≈ 0.333333333333"),
        ("2/7 * 7", "2"),
        ("-3.5e2", "-350"),
        ("7 // 2", "3"),
        ("-7 // 2", "-4"),  # floor division rounds down
        ("7 % 3", "1"),
        ("2^10", "1024"),  # ^ is power
        ("2**-2", "0.25"),
        ("sqrt(144)", "12"),
        ("sqrt(9/4)", "1.5"),  # exact root of a fraction: 3/2
        ("8**(1/3)", "2"),  # exact cube root
        ("abs(-5) + max(1, 9, 4) - min(3, 2)", "12"),  # 5 + 9 - 2
        ("factorial(10)", "3628800"),
        ("round(2.5)", "3"),  # halves away from zero
        ("round(-2.675, 2)", "-2.68"),  # the decimal the user typed, not the float 2.67499...
        ("gcd(84, 36) + lcm(4, 6)", "24"),  # 12 + 12
        ("log(1000, 10)", "3"),  # exact, not 2.9999999999999996
        ("log2(1024)", "10"),
        ("floor(7/2) + ceil(7/2)", "7"),  # 3 + 4
        ("2**100", "1267650600228229401496703205376"),
    ],
)
def test_exact_arithmetic(expression: str, expected: str) -> None:
    assert calculate(expression) == expected


def test_irrational_results_are_decimals() -> None:
    assert float(calculate("sqrt(2)")) == pytest.approx(2**0.5, rel=1e-14)
    assert float(calculate("sin(pi/6)")) == pytest.approx(0.5, rel=1e-14)


@pytest.mark.parametrize(
    ("equation", "expected"),
    [
        ("2*x + 3 = 7", "x = 2"),  # 2x = 4
        ("x**2 - 5*x + 6 = 0", "x = 2 or x = 3"),  # (x - 2)(x - 3)
        ("3*y - 1 = y + 2", "y = 1.5"),  # 2y = 3
        ("1/x = 4", "x = 0.25"),
        ("x/(x - 1) = 2", "x = 2"),  # x = 2x - 2
        ("x^4 = 16", "x = -2 or x = 2"),  # the complex ±2i are left out when real roots exist
        ("x + 1 = x", "no solution"),
        ("2*(x + 1) = 2*x + 2", "every value of x is a solution"),
        ("2 + 2 = 4", "true"),
        ("2 + 2 = 5", "false (left side 4, right side 5)"),
    ],
)
def test_equations(equation: str, expected: str) -> None:
    assert calculate(equation) == expected


def test_irrational_and_complex_roots() -> None:
    assert calculate("x**2 = 2") == "x = -sqrt(2) ≈ -1.41421356237 or x = sqrt(2) ≈ 1.41421356237"
    assert calculate("x**2 + 1 = 0") == "no real solution; complex: x = -I ≈ -1*I or x = I ≈ 1*I"
    # Degree 5 has no closed form: the one real root of x^5 - x - 1, numerically.
    root = float(calculate("x**5 - x - 1 = 0").split("≈")[1])
    assert root**5 - root - 1 == pytest.approx(0, abs=1e-9)


@pytest.mark.parametrize(
    ("expression", "needle"),
    [
        ("__import__('os').system('echo hi')", "unknown function"),
        ("__import__('os')", "unknown function '__import__'"),
        ("().__class__.__bases__", "unsupported syntax"),
        ("open('/etc/passwd')", "unknown function 'open'"),
        ("[1, 2, 3]", "unsupported syntax: List"),
        ("lambda: 1", "unsupported syntax: Lambda"),
        ("'a' * 3", "only numbers"),
        ("1j + 1", "only numbers"),
        ("1 if 2 else 3", "unsupported syntax"),
        ("x", "'x' is unknown"),
        ("x*y = 1", "only one unknown"),
        ("1 = 2 = 3", "at most one '='"),
        ("3 < 4", "comparisons are not supported"),
        ("2x + 1", "write multiplication explicitly"),
        ("hello world", "could not parse"),
        ("", "empty expression"),
        ("1/0", "division by zero"),
        ("sqrt(-4)", "not a real number"),
        ("(-8)**(1/3)", "not a real number"),
        ("factorial(2.5)", "must be an integer"),
        ("factorial(-1)", "factorial is defined here"),
        ("sqrt", "is a function"),
        ("sqrt(1, 2)", "sqrt takes 1–1 arguments"),
        ("max(*[1, 2])", "plain positional arguments"),
        ("sqrt(x) = 3", "only polynomial equations"),
        ("2**x = 8", "cannot appear in an exponent"),
        ("1" * 1001, "longer than 1000 characters"),
    ],
)
def test_refused_input(expression: str, needle: str) -> None:
    with pytest.raises(CalculatorError) as info:
        calculate(expression)
    assert needle in str(info.value)


@pytest.mark.parametrize(
    "expression",
    ["9**9**9", "10**100000", "2**2**2**2**2", "factorial(10**6)", "(x + 1)**8**8 = 0", "1e999"],
)
def test_huge_computations_are_refused_at_once(expression: str) -> None:
    start = time.monotonic()
    with pytest.raises(CalculatorError):
        calculate(expression)
    assert time.monotonic() - start < 0.5


async def _call(expression: object) -> object:
    return await run_tool_call("calculator", {"expression": expression})


def test_tool_call_success_and_error_observation() -> None:
    ok = asyncio.run(_call("12345*6789"))
    assert ok.ok and ok.observation == "83810205"
    bad = asyncio.run(_call("__import__('os')"))
    assert not bad.ok and bad.error == "invalid_arguments"
    assert bad.observation.startswith("Error: unknown function")
    too_big = asyncio.run(_call("9**9**9"))
    assert not too_big.ok and "too large" in too_big.observation
    wrong_type = asyncio.run(_call(12))
    assert not wrong_type.ok and "expected string" in wrong_type.observation
