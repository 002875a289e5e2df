"""Arithmetic word problems for the SmolLM2 example: seven structures, each a sentence template
with its expression, seeded and deterministic.

The supervised warm start sees three structures (``SFT_KINDS``); RL trains on all seven; the
held-out evaluation draws from all seven with numbers no training row uses. A problem is
``{"question", "answer", "expression", "kind"}``; ``expression`` is what a right calculator call
computes (the answer is its exact integer value).
"""

from __future__ import annotations

import random
from collections.abc import Iterable

Problem = dict[str, str]

# kind: (question template, expression template); {a} {b} {c} {d} are the operands
STRUCTURES: dict[str, tuple[str, str]] = {
    "crates": ("A warehouse has {a} crates. Each crate holds {b} boxes and each box holds {c} "
               "nails. How many nails are in the warehouse?", "{a}*{b}*{c}"),
    "train": ("A train travels at {a} km per hour for {b} hours, then {c} km more. How many km "
              "does it travel in all?", "{a}*{b}+{c}"),
    "coins": ("Sam has {a} coins, spends {b} of them and then earns {c} more. How many coins "
              "does Sam have now?", "{a}-{b}+{c}"),
    "classes": ("A school has {a} classes of {b} students each, and {c} students are absent "
                "today. How many students are present?", "{a}*{b}-{c}"),
    "orchard": ("A farmer plants {a} rows of {b} apple trees and {c} rows of {d} pear trees. "
                "How many trees does the farmer plant?", "{a}*{b}+{c}*{d}"),
    "balloons": ("A club buys {a} red and {b} blue balloons for each of its {c} parties. How "
                 "many balloons does it buy?", "({a}+{b})*{c}"),
    "savings": ("Mia saves {a} dollars a week for {b} weeks, then spends {c} dollars on a bike. "
                "How many dollars are left?", "{a}*{b}-{c}"),
}
SFT_KINDS = ("crates", "train", "coins")
ALL_KINDS = tuple(STRUCTURES)


def _operands(kind: str, rng: random.Random) -> dict[str, int]:
    """Operands of 2-3 digits that keep every answer a positive integer."""
    n = {k: rng.randint(12, 999) for k in "abcd"}
    if kind == "crates":
        n["c"] = rng.randint(12, 99)
    if kind == "coins":
        n["b"] = rng.randint(12, n["a"])
    if kind in ("classes", "savings"):
        n["c"] = rng.randint(12, n["a"] * n["b"] - 1)
    return n


def make_problem(kind: str, rng: random.Random) -> Problem:
    question, expression = STRUCTURES[kind]
    n = _operands(kind, rng)
    expr = expression.format(**n)
    value = eval(expr, {"__builtins__": {}})  # our own template and integers only
    return {"question": question.format(**n), "answer": str(value), "expression": expr, "kind": kind}


def draw(kinds: Iterable[str], count: int, rng: random.Random, seen: set[str]) -> list[Problem]:
    """``count`` problems, kinds in turn, whose questions are not in ``seen`` (which gains them)."""
    kinds, out = list(kinds), []
    while len(out) < count:
        p = make_problem(kinds[len(out) % len(kinds)], rng)
        if p["question"] not in seen:
            seen.add(p["question"])
            out.append(p)
    return out


def splits(seed: int = 0, sft: int = 200, rl: int = 2000, held_out: int = 100) -> dict[str, list[Problem]]:
    """The three sets, drawn from one generator: the held-out problems first, then the RL rows,
    then the supervised ones, none repeating a question of another."""
    rng, seen = random.Random(seed), set()
    held = draw(ALL_KINDS, held_out, rng, seen)
    return {"held_out": held, "rl": draw(ALL_KINDS, rl, rng, seen), "sft": draw(SFT_KINDS, sft, rng, seen)}

