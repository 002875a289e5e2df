"""Exact arithmetic on a validated expression tree, for the ``calculator`` tool.

Numbers are ``fractions.Fraction`` so ``0.1 + 0.2`` is exactly ``0.3`` and ``1/3`` stays a
third; functions with irrational results (``sin``, ``log``, a non-perfect ``sqrt``) give floats.
Every number is bounded by :class:`CalculatorSettings`: a power or factorial whose result would
pass ``max_digits`` is refused before it is computed. :mod:`~agentfly.rollout.tools.algebra`
solves equations on the same trees; :mod:`~agentfly.rollout.tools.calculator` parses the input
and chooses between them.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, localcontext
from fractions import Fraction
from functools import cached_property

MAX_ROOT_INDEX = 64  # exact roots of x**(p/q) are tried for q up to this

Number = Fraction | float


@dataclass(frozen=True)
class CalculatorSettings:
    """The calculator's size limits.

    Attributes:
        max_digits: most decimal digits of any exact number in the input, in an intermediate
            value or in the result (an integer, or a fraction's numerator and denominator each);
            a float result must be below ``10**max_digits`` in magnitude.
        max_chars: longest input, in characters.
        max_degree: highest degree of an equation's polynomial.
    """

    max_digits: int = 3000
    max_chars: int = 1000
    max_degree: int = 10

    def __post_init__(self) -> None:
        for name in ("max_digits", "max_chars", "max_degree"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")

    @cached_property
    def bound(self) -> int:
        """``10**max_digits``: the smallest magnitude with too many digits."""
        return 10**self.max_digits


DEFAULT_SETTINGS = CalculatorSettings()


class CalculatorError(ValueError):
    """Input the calculator refuses; the message is shown to the model."""


def _too_large(limits: CalculatorSettings) -> CalculatorError:
    return CalculatorError(
        f"a number would have more than {limits.max_digits} digits; too large to compute"
    )


def _check(value: Number, limits: CalculatorSettings) -> Number:
    if isinstance(value, float):
        if not math.isfinite(value):
            raise CalculatorError("the result is not a finite number")
        if abs(value) >= limits.bound:  # int/float comparison is exact
            raise _too_large(limits)
        return value
    if abs(value.numerator) >= limits.bound or value.denominator >= limits.bound:
        raise _too_large(limits)
    return value


def _log10(value: Fraction) -> float:
    """log10 of the larger of |numerator| and denominator (no float overflow)."""
    return max(math.log10(abs(value.numerator) or 1), math.log10(value.denominator))


def _integer(value: Number, what: str) -> int:
    if isinstance(value, Fraction) and value.denominator == 1:
        return value.numerator
    raise CalculatorError(f"{what} must be an integer, got {format_number(value)}")


def _iroot(n: int, q: int) -> int | None:
    """The exact integer q-th root of n ≥ 0, or None."""
    if n < 2:
        return n
    x = 1 << -(-n.bit_length() // q)  # ≥ the root
    while True:
        y = ((q - 1) * x + n // x ** (q - 1)) // q
        if y >= x:
            break
        x = y
    return x if x**q == n else None


def _power(limits: CalculatorSettings, base: Number, exponent: Number) -> Number:
    if isinstance(base, Fraction) and isinstance(exponent, Fraction):
        p, q = exponent.numerator, exponent.denominator
        if base == 0 and exponent < 0:
            raise ZeroDivisionError
        # the result's larger part has floor(|exponent| * log10(base's larger part)) + 1 digits
        if abs(base) not in (0, 1) and abs(exponent) * _log10(base) >= limits.max_digits + 1e-9:
            raise _too_large(limits)
        if q == 1:
            return base**p
        if base >= 0 and q <= MAX_ROOT_INDEX:
            num, den = _iroot(base.numerator, q), _iroot(base.denominator, q)
            if num is not None and den is not None:
                return Fraction(num, den) ** p
    if base < 0 and not (isinstance(exponent, Fraction) and exponent.denominator == 1):
        raise CalculatorError("a negative number to a fractional power is not a real number")
    return float(base) ** float(exponent)


def _round(limits: CalculatorSettings, value: Number, digits: Number = Fraction(0)) -> Number:
    n = _integer(digits, "round's number of digits")
    if abs(n) > 100:
        raise CalculatorError("round takes at most 100 digits")
    scale = Fraction(10) ** n
    rounded = math.floor(abs(Fraction(value)) * scale + Fraction(1, 2)) / scale
    return rounded if value >= 0 else -rounded


def _factorial(limits: CalculatorSettings, value: Number) -> Number:
    n = _integer(value, "factorial's argument")
    if n < 0:
        raise CalculatorError(f"factorial is defined here for whole numbers n ≥ 0, got {n}")
    # n! has floor(log10(n!)) + 1 digits; lgamma(n + 1) = ln(n!)
    if n >= 2**53 or math.lgamma(n + 1) / math.log(10) >= limits.max_digits + 1e-9:
        raise _too_large(limits)
    return Fraction(math.factorial(n))


def _log(limits: CalculatorSettings, value: Number, base: Number | None = None) -> Number:
    if value <= 0 or (base is not None and (base <= 0 or base == 1)):
        raise CalculatorError("log needs a positive argument (and a positive base other than 1)")
    if isinstance(value, Fraction) and isinstance(base, Fraction):
        guess = round((math.log(value.numerator) - math.log(value.denominator)) / math.log(base))
        if abs(guess) * _log10(base) < limits.max_digits + 1 and base**guess == value:
            return Fraction(guess)
    if isinstance(value, Fraction):
        ln = math.log(value.numerator) - math.log(value.denominator)
    else:
        ln = math.log(value)
    return ln if base is None else ln / math.log(base)


def _sqrt(limits: CalculatorSettings, value: Number) -> Number:
    if value < 0:
        raise CalculatorError("the square root of a negative number is not a real number")
    return _power(limits, value, Fraction(1, 2))


def _plain(fn: Callable[..., Number]) -> Callable[..., Number]:
    """A function that needs no limits, in the table's ``fn(limits, *args)`` form."""
    return lambda _limits, *args: fn(*args)


def _float_fn(fn: Callable[[float], float]) -> Callable[..., Number]:
    return lambda _limits, x: fn(float(x))


# name -> (function(limits, *args), min args, max args)
FUNCTIONS: dict[str, tuple[Callable[..., Number], int, int]] = {
    "sqrt": (_sqrt, 1, 1),
    "abs": (_plain(abs), 1, 1),
    "round": (_round, 1, 2),
    "min": (_plain(min), 1, 100),
    "max": (_plain(max), 1, 100),
    "factorial": (_factorial, 1, 1),
    "floor": (_plain(lambda x: Fraction(math.floor(x))), 1, 1),
    "ceil": (_plain(lambda x: Fraction(math.ceil(x))), 1, 1),
    "gcd": (
        _plain(lambda *a: Fraction(math.gcd(*(_integer(x, "gcd's argument") for x in a)))),
        1,
        100,
    ),
    "lcm": (
        _plain(lambda *a: Fraction(math.lcm(*(_integer(x, "lcm's argument") for x in a)))),
        1,
        100,
    ),
    "log": (_log, 1, 2),
    "ln": (_log, 1, 1),
    "log10": (lambda limits, x: _log(limits, x, Fraction(10)), 1, 1),
    "log2": (lambda limits, x: _log(limits, x, Fraction(2)), 1, 1),
    "exp": (_float_fn(math.exp), 1, 1),
    "sin": (_float_fn(math.sin), 1, 1),
    "cos": (_float_fn(math.cos), 1, 1),
    "tan": (_float_fn(math.tan), 1, 1),
}
CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e}

_BINARY: dict[type, Callable[[CalculatorSettings, Number, Number], Number]] = {
    ast.Add: _plain(lambda a, b: a + b),
    ast.Sub: _plain(lambda a, b: a - b),
    ast.Mult: _plain(lambda a, b: a * b),
    ast.Div: _plain(lambda a, b: a / b),
    ast.FloorDiv: _plain(lambda a, b: Fraction(a // b)),
    ast.Mod: _plain(lambda a, b: a % b),
    ast.Pow: _power,
}
_UNARY: dict[type, Callable[[Number], Number]] = {ast.USub: lambda a: -a, ast.UAdd: lambda a: a}


def _literal(node: ast.Constant, limits: CalculatorSettings) -> Fraction:
    value = node.value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CalculatorError(f"only numbers are allowed, not {value!r}")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise CalculatorError("the number is too large")
        return Fraction(repr(value))  # the decimal the user wrote, not its binary approximation
    return _check(Fraction(value), limits)


def validate_tree(node: ast.AST, limits: CalculatorSettings) -> set[str]:
    """Refuse anything outside the whitelist; return the unknown names used."""
    if isinstance(node, ast.Expression):
        return validate_tree(node.body, limits)
    if isinstance(node, ast.Constant):
        _literal(node, limits)
        return set()
    if isinstance(node, ast.Name):
        if node.id in FUNCTIONS:
            raise CalculatorError(f"{node.id} is a function; call it like {node.id}(...)")
        return set() if node.id in CONSTANTS else {node.id}
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return validate_tree(node.left, limits) | validate_tree(node.right, limits)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return validate_tree(node.operand, limits)
    if isinstance(node, ast.Call):
        name = node.func.id if isinstance(node.func, ast.Name) else None
        if name not in FUNCTIONS:
            known = ", ".join(FUNCTIONS)
            raise CalculatorError(f"unknown function {ast.unparse(node.func)!r} (known: {known})")
        if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
            raise CalculatorError(f"{name} takes plain positional arguments")
        _, low, high = FUNCTIONS[name]
        if not low <= len(node.args) <= high:
            raise CalculatorError(f"{name} takes {low}–{high} arguments, got {len(node.args)}")
        return set().union(*(validate_tree(a, limits) for a in node.args))
    raise CalculatorError(f"unsupported syntax: {type(node).__name__} in {ast.unparse(node)!r}")


def evaluate(node: ast.AST, limits: CalculatorSettings = DEFAULT_SETTINGS) -> Number:
    """The value of a tree that passed validation and has no unknowns; every value is checked
    against ``limits``."""
    if isinstance(node, ast.Expression):
        return evaluate(node.body, limits)
    if isinstance(node, ast.Constant):
        return _literal(node, limits)
    if isinstance(node, ast.Name):
        return CONSTANTS[node.id]
    if isinstance(node, ast.BinOp):
        left, right = evaluate(node.left, limits), evaluate(node.right, limits)
        return _check(_BINARY[type(node.op)](limits, left, right), limits)
    if isinstance(node, ast.UnaryOp):
        return _UNARY[type(node.op)](evaluate(node.operand, limits))
    assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    fn = FUNCTIONS[node.func.id][0]
    return _check(fn(limits, *(evaluate(a, limits) for a in node.args)), limits)


def format_number(value: Number) -> str:
    """An exact integer or terminating decimal; ``p/q ≈ decimal`` otherwise; floats to 15 digits."""
    if isinstance(value, float):
        return format(value, ".15g")
    if value.denominator == 1:
        return str(value.numerator)
    den, twos, fives = value.denominator, 0, 0
    while den % 2 == 0:
        den, twos = den // 2, twos + 1
    while den % 5 == 0:
        den, fives = den // 5, fives + 1
    with localcontext() as ctx:
        ctx.prec = 40
        decimal = Decimal(value.numerator) / Decimal(value.denominator)
        if den == 1:  # terminating: print every digit
            places = max(twos, fives)
            digits = abs(value.numerator) * 10**places // value.denominator
            sign = "-" if value < 0 else ""
            text = str(digits).rjust(places + 1, "0")
            return f"{sign}{text[:-places]}.{text[-places:]}"
        return f"{value.numerator}/{value.denominator} ≈ {format(decimal, '.12g')}"
