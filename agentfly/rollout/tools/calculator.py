"""``calculator``: exact arithmetic and one-unknown polynomial equations, never ``eval``.

The expression is parsed with ``ast`` and walked over a whitelist of nodes (numbers, ``+ - * /
// % **``, unary signs, calls to a few named functions, the constants ``pi`` and ``e``).
Numbers are ``fractions.Fraction`` so ``0.1 + 0.2`` is exactly ``0.3`` and ``1/3`` stays a
third; functions with irrational results (``sin``, ``log``, a non-perfect ``sqrt``) give floats.

Sizes are bounded by :class:`CalculatorSettings` (``agent.init_config.tool_config.calculator``):
``max_digits`` bounds every number the calculator handles — a literal in the input, each
intermediate value and the result: an integer, and a fraction's numerator and denominator, have
at most ``max_digits`` decimal digits; a float result is below ``10**max_digits`` in magnitude. A
power or factorial whose result would pass it is refused before it is computed, so ``9**9**9``
fails at once instead of hanging. ``max_chars`` bounds the input's length.

An input with one ``=`` and one unknown name (``2*x + 3 = 7``) is solved with sympy; the sympy
expression is built from the validated tree, never from the raw string (``sympify`` evals).
Only polynomial or rational equations up to degree ``max_degree`` are accepted.

Departures from Python: ``^`` means power, not xor; ``round`` rounds halves away from zero.
"""

from __future__ import annotations

import ast
import re

from agentfly.rollout.tools.algebra import solve_equation
from agentfly.rollout.tools.arithmetic import (
    DEFAULT_SETTINGS,
    CalculatorError,
    CalculatorSettings,
    evaluate,
    format_number,
    validate_tree,
)
from agentfly.rollout.tools.base import INVALID_ARGUMENTS, ToolResult, tool


def _parse(text: str) -> ast.Expression:
    try:
        return ast.parse(text.strip(), mode="eval")
    except SyntaxError as e:
        implicit = re.search(r"\d[a-zA-Z(]", text)
        hint = " (write multiplication explicitly, e.g. 2*x)" if implicit else ""
        raise CalculatorError(f"could not parse {text.strip()!r}: {e.msg}{hint}") from None
    except (RecursionError, MemoryError, ValueError):
        raise CalculatorError(f"could not parse {text.strip()!r}") from None


def _normalize(expression: str, limits: CalculatorSettings) -> list[str]:
    """The sides of the input: one for an expression, two for an equation."""
    if len(expression) > limits.max_chars:
        raise CalculatorError(f"the input is longer than {limits.max_chars} characters")
    text = expression.replace("^", "**").replace("×", "*").replace("÷", "/").replace("−", "-")
    if re.search(r"[<>!]", text):
        raise CalculatorError("comparisons are not supported; use = for an equation")
    sides = text.replace("==", "=").split("=")
    if len(sides) > 2:
        raise CalculatorError("use at most one '=' (one equation at a time)")
    if not all(s.strip() for s in sides):
        raise CalculatorError("empty expression" if len(sides) == 1 else "an empty side of '='")
    return sides


def calculate(expression: str, limits: CalculatorSettings = DEFAULT_SETTINGS) -> str:
    """Evaluate an expression or solve an equation; raises ``CalculatorError`` on bad input.

    Args:
        expression: the expression or equation.
        limits: the size limits (see :class:`CalculatorSettings`).
    """
    trees = [_parse(side) for side in _normalize(expression, limits)]
    unknowns = set().union(*(validate_tree(t, limits) for t in trees))
    if len(unknowns) > 1:
        raise CalculatorError(f"only one unknown is supported, found {', '.join(sorted(unknowns))}")
    try:
        if unknowns:
            if len(trees) == 1:
                (name,) = unknowns
                raise CalculatorError(
                    f"{name!r} is unknown; to solve for it write an equation such as 2*{name} + 3 = 7"
                )
            return solve_equation(trees[0], trees[1], unknowns.pop(), limits)
        values = [evaluate(t, limits) for t in trees]
    except ZeroDivisionError:
        raise CalculatorError("division by zero") from None
    except OverflowError:
        raise CalculatorError("the result is too large") from None
    if len(values) == 1:
        return format_number(values[0])
    left, right = values
    if left == right:
        return "true"
    return f"false (left side {format_number(left)}, right side {format_number(right)})"


@tool(
    name="calculator",
    timeout=10.0,
    max_output_chars=4000,
    settings=CalculatorSettings,
    runs_in="thread",  # trusted, and a thread call costs no pickling
)
def calculator(expression: str, settings: CalculatorSettings) -> str | ToolResult:
    """Evaluate an arithmetic expression exactly, or solve an equation in one unknown.

    Supports + - * / // % ** (or ^), parentheses, pi, e and the functions sqrt, abs, round,
    min, max, factorial, floor, ceil, gcd, lcm, log, ln, log10, log2, exp, sin, cos, tan.
    Fractions stay exact (1/3 + 1/6 gives 1/2). An equation like "2*x + 3 = 7" is solved for x.

    Args:
        expression: the expression or equation, e.g. "(3 + 4) * 12" or "x**2 - 5*x + 6 = 0".
    """
    try:
        return calculate(expression, settings)
    except CalculatorError as e:
        return ToolResult.failure(INVALID_ARGUMENTS, f"Error: {e}")
