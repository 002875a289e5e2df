"""Solving one polynomial or rational equation in one unknown, for the ``calculator`` tool.

The sympy expression is built node by node from a tree the calculator has already validated;
parts without the unknown are computed exactly by the calculator first. The degree is bounded
from the tree before sympy expands anything, so ``(x + 1)**8**8 = 0`` is refused at once.
"""

from __future__ import annotations

import ast
from fractions import Fraction
from typing import Any

from agentfly.rollout.tools.arithmetic import (
    CalculatorError,
    CalculatorSettings,
    evaluate,
    format_number,
)


def _has(node: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node))


def _degree(node: ast.AST, name: str, limits: CalculatorSettings) -> int:
    """An upper bound on the polynomial degree of ``node`` in ``name``; refuses other shapes."""
    if not _has(node, name):
        return 0
    if isinstance(node, ast.Name):
        return 1
    if isinstance(node, ast.UnaryOp):
        return _degree(node.operand, name, limits)
    if isinstance(node, ast.BinOp):
        left, right = _degree(node.left, name, limits), _degree(node.right, name, limits)
        if isinstance(node.op, (ast.Add, ast.Sub)):
            return max(left, right)
        if isinstance(node.op, (ast.Mult, ast.Div)):
            return left + right
        if isinstance(node.op, ast.Pow):
            if right:
                raise CalculatorError(f"{name} cannot appear in an exponent")
            exponent = evaluate(node.right, limits)
            if not (isinstance(exponent, Fraction) and exponent.denominator == 1):
                raise CalculatorError(f"powers of {name} must be whole numbers")
            degree = left * abs(exponent.numerator)
            if degree > limits.max_degree:
                raise CalculatorError(f"the equation's degree is above {limits.max_degree}")
            return degree
        raise CalculatorError(f"// and % cannot be applied to the unknown {name}")
    raise CalculatorError(
        f"only polynomial equations are supported; functions of {name} (sqrt, log...) are not"
    )


def _to_sympy(node: ast.AST, name: str, symbol: Any, limits: CalculatorSettings) -> Any:
    import sympy

    if not _has(node, name):
        value = evaluate(node, limits)
        if isinstance(value, Fraction):
            return sympy.Rational(value.numerator, value.denominator)
        return sympy.Float(value, 15)
    if isinstance(node, ast.Name):
        return symbol
    if isinstance(node, ast.UnaryOp):
        operand = _to_sympy(node.operand, name, symbol, limits)
        return -operand if isinstance(node.op, ast.USub) else operand
    assert isinstance(node, ast.BinOp)
    left = _to_sympy(node.left, name, symbol, limits)
    right = _to_sympy(node.right, name, symbol, limits)
    if isinstance(node.op, ast.Add):
        return left + right
    if isinstance(node.op, ast.Sub):
        return left - right
    if isinstance(node.op, ast.Mult):
        return left * right
    if isinstance(node.op, ast.Div):
        return left / right
    return left**right  # ast.Pow, with a whole exponent (checked by _degree)


def _format_root(name: str, root: Any) -> str:
    import sympy

    if root.is_Rational:
        return f"{name} = {format_number(Fraction(int(root.p), int(root.q)))}"
    approx = complex(sympy.N(root, 15))
    if abs(approx.imag) < 1e-12:
        approx_text = format(approx.real, ".12g")
    elif abs(approx.real) < 1e-12:
        approx_text = f"{approx.imag:.12g}*I"
    else:
        sign = "+" if approx.imag >= 0 else "-"
        approx_text = f"{approx.real:.12g} {sign} {abs(approx.imag):.12g}*I"
    exact = str(root)
    if root.is_Float or len(exact) > 60:
        return f"{name} ≈ {approx_text}"
    return f"{name} = {exact} ≈ {approx_text}"


def _is_real(root: Any) -> bool:
    import sympy

    value = complex(sympy.N(root, 30))
    return abs(value.imag) <= 1e-12 * max(1.0, abs(value))


def solve_equation(
    left: ast.Expression, right: ast.Expression, name: str, limits: CalculatorSettings
) -> str:
    """Solve ``left = right`` for ``name``; both trees already passed the calculator's whitelist.

    ``limits`` bounds the equation's degree and the size of its known parts.

    Returns:
        The real solutions (``"x = 2"``, ``"x = -3 or x = 2"``; irrational ones with a decimal
        approximation); the complex ones only when there is no real one (``"no real solution;
        complex: ..."``); ``"no solution"`` or ``"every value of x is a solution"``.
    """
    import sympy

    degree = _degree(left.body, name, limits) + _degree(right.body, name, limits)
    if degree > limits.max_degree:
        raise CalculatorError(f"the equation's degree is above {limits.max_degree}")
    symbol = sympy.Symbol(name)
    expr = _to_sympy(left.body, name, symbol, limits) - _to_sympy(right.body, name, symbol, limits)
    numerator, denominator = sympy.fraction(sympy.together(expr))
    poly = sympy.Poly(sympy.expand(numerator), symbol)
    if poly.is_zero:
        return f"every value of {name} is a solution"
    if poly.degree() == 0:
        return "no solution"
    found = sympy.roots(poly)  # {root: multiplicity}
    roots = list(found)
    if sum(found.values()) < poly.degree():  # no closed form for some: numeric roots
        roots = list(dict.fromkeys(poly.nroots(n=15)))
    roots = [r for r in roots if abs(complex(sympy.N(denominator.subs(symbol, r)))) > 1e-12]
    real = sorted((r for r in roots if _is_real(r)), key=lambda r: float(sympy.re(sympy.N(r))))
    complex_roots = [r for r in roots if not _is_real(r)]
    if real:
        return " or ".join(_format_root(name, r) for r in real)
    if complex_roots:
        return "no real solution; complex: " + " or ".join(
            _format_root(name, r) for r in complex_roots
        )
    return "no solution"
