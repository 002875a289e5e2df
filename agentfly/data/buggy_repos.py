"""An offline SWE-style task: small Python repositories, each with one planted bug and a test
that fails on it, so the SWE agents (``bash_swe``, ``qwen3coder_swe``) can train without
R2E-Gym's container images.

:func:`make_task` makes one row from a seed (the same seed, the same row):

- ``question``: the issue, as a user reports it: a call of the buggy function, what it returns
  and what it should return.
- ``repo``: the files, ``{path: text}``: a package ``<pkg>/`` whose module holds the buggy
  function among two correct ones (in a random order), its unittest tests ``tests/`` (one test
  per function; the buggy one's fails), and a README. The SWE tools' workspace starts from them.
- ``test_command``: ``python -m unittest -q``, which passes exactly when the bug is fixed.
- ``test_files``: the test files, which ``swe_test_reward`` restores before it runs the command
  (an edited test does not count).
- ``bug``: the planted line and its fix (``kind``, ``path``, ``buggy``, ``fixed``): the reference
  patch, as an SWE-bench row's ``patch``; never shown to the model.
- ``instance_id``.

Bug kinds (:data:`BUG_KINDS`; a seed's kind is ``BUG_KINDS[seed % 6]`` unless given):
``off_by_one`` (a range that stops one short), ``wrong_operator`` (``+`` for ``-``),
``wrong_comparison`` (``>`` for ``>=``), ``wrong_initial_value`` (a product from 0),
``inverted_condition`` (``if not`` for ``if``), ``wrong_index`` (the first item for the last).

:func:`make_dataset` writes ``swe_train.json`` and ``swe_val.json`` (JSON lists), the validation
rows from seeds after the training rows': ``python -m agentfly.data.buggy_repos OUT_DIR --train
64 --val 8``.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TEST_COMMAND = "python -m unittest -q"
PACKAGES = ("toolkit", "mathutil", "helpers", "pyutils", "smallkit")
MODULES = ("core", "ops", "funcs", "utils")


@dataclass(frozen=True)
class Function:
    """One function of a repository: its source (correct), a call and its right result.

    Attributes:
        name: the function's name.
        source: its definition.
        args: the arguments of the call its test makes.
        buggy: the line the bug replaces (None: the function stays correct).
        fixed: that line as ``source`` has it.
    """

    name: str
    source: str
    args: tuple[Any, ...]
    buggy: str | None = None
    fixed: str | None = None

    def run(self, source: str | None = None) -> Any:
        """The call's result with ``source`` (default: the correct source)."""
        scope: dict[str, Any] = {}
        exec(source or self.source, scope)  # our own generated code
        return scope[self.name](*self.args)

    @property
    def call(self) -> str:
        return f"{self.name}({', '.join(map(repr, self.args))})"


def _off_by_one(rng: random.Random) -> Function:
    fixed = "    for i in range(1, n + 1):"
    name = rng.choice(["sum_upto", "total_upto", "triangular"])
    source = (
        f"def {name}(n):\n"
        '    """The sum of the integers from 1 to n, n included."""\n'
        f"    total = 0\n{fixed}\n        total += i\n    return total\n"
    )
    return Function(name, source, (rng.randint(3, 9),), "    for i in range(1, n):", fixed)


def _wrong_operator(rng: random.Random) -> Function:
    fixed = "    return price * quantity - discount"
    name = rng.choice(["order_total", "final_price", "bill_amount"])
    source = (
        f"def {name}(price, quantity, discount):\n"
        '    """The price of `quantity` items at `price` each, less a flat `discount`."""\n'
        f"{fixed}\n"
    )
    price = rng.randint(3, 9)
    args = (price, rng.randint(2, 5), rng.randint(1, price - 1))
    return Function(name, source, args, "    return price * quantity + discount", fixed)


def _wrong_comparison(rng: random.Random) -> Function:
    fixed = "    return age >= limit"
    name, limit = rng.choice(["can_vote", "is_adult", "may_enter"]), rng.choice([16, 18, 21])
    source = (
        f"def {name}(age, limit={limit}):\n"
        '    """Whether `age` reaches `limit` (`limit` itself included)."""\n'
        f"{fixed}\n"
    )
    return Function(name, source, (limit,), "    return age > limit", fixed)


def _wrong_initial_value(rng: random.Random) -> Function:
    fixed = "    result = 1"
    name = rng.choice(["product", "multiply_all", "prod"])
    source = (
        f"def {name}(values):\n"
        '    """The product of `values` (1 for no values)."""\n'
        f"{fixed}\n    for value in values:\n        result *= value\n    return result\n"
    )
    args = ([rng.randint(2, 6) for _ in range(3)],)
    return Function(name, source, args, "    result = 0", fixed)


def _inverted_condition(rng: random.Random) -> Function:
    fixed = "    return [word for word in words if word]"
    name = rng.choice(["non_empty", "drop_blanks", "keep_words"])
    source = (
        f"def {name}(words):\n"
        '    """The words of `words` that are not empty, in order."""\n'
        f"{fixed}\n"
    )
    words = rng.sample(["alpha", "beta", "gamma", "delta", "omega"], 3)
    words.insert(rng.randint(0, 3), "")
    return Function(name, source, (words,), "    return [word for word in words if not word]", fixed)


def _wrong_index(rng: random.Random) -> Function:
    fixed = "    return items[-1]"
    name = rng.choice(["last_item", "final_element", "tail_item"])
    source = (
        f"def {name}(items):\n"
        '    """The last element of `items` (None when it is empty)."""\n'
        f"    if not items:\n        return None\n{fixed}\n"
    )
    args = (rng.sample(range(1, 50), rng.randint(3, 5)),)
    return Function(name, source, args, "    return items[0]", fixed)


BUGS: dict[str, Callable[[random.Random], Function]] = {
    "off_by_one": _off_by_one,
    "wrong_operator": _wrong_operator,
    "wrong_comparison": _wrong_comparison,
    "wrong_initial_value": _wrong_initial_value,
    "inverted_condition": _inverted_condition,
    "wrong_index": _wrong_index,
}
BUG_KINDS = tuple(BUGS)

#: correct functions the buggy one sits among: (name, source, arguments of the test's call)
DISTRACTORS: tuple[tuple[str, str, tuple[Any, ...]], ...] = (
    ("clamp", 'def clamp(x, low, high):\n    """`x` kept within [low, high]."""\n'
     "    return max(low, min(x, high))\n", (15, 0, 10)),
    ("mean", 'def mean(values):\n    """The arithmetic mean of `values`."""\n'
     "    return sum(values) / len(values)\n", ([2, 4, 9],)),
    ("count_vowels", 'def count_vowels(text):\n    """How many of the letters of `text` are vowels."""\n'
     '    return sum(1 for ch in text.lower() if ch in "aeiou")\n', ("Education",)),
    ("reverse_words", 'def reverse_words(text):\n    """The words of `text` in reverse order."""\n'
     '    return " ".join(reversed(text.split()))\n', ("one two three",)),
    ("is_even", 'def is_even(n):\n    """Whether `n` is even."""\n    return n % 2 == 0\n', (14,)),
)


def _test_file(package: str, module: str, functions: list[Function]) -> str:
    names = ", ".join(sorted(f.name for f in functions))
    tests = "".join(
        f"\n    def test_{f.name}(self):\n        self.assertEqual({f.call}, {f.run()!r})\n"
        for f in functions
    )
    return (
        f"import unittest\n\nfrom {package}.{module} import {names}\n\n\n"
        f"class Test{module.capitalize()}(unittest.TestCase):{tests}\n\n"
        'if __name__ == "__main__":\n    unittest.main()\n'
    )


def make_task(seed: int, kind: str | None = None) -> dict[str, Any]:
    """The row of seed ``seed`` (see the module docstring); ``kind`` forces the bug's kind.

    Raises:
        ValueError: an unknown ``kind``.
    """
    kind = BUG_KINDS[seed % len(BUG_KINDS)] if kind is None else kind
    if kind not in BUGS:
        raise ValueError(f"unknown bug kind {kind!r} (known: {', '.join(BUG_KINDS)})")
    rng = random.Random(seed)
    package, module = rng.choice(PACKAGES), rng.choice(MODULES)
    bug = BUGS[kind](rng)
    others = [Function(n, s, a) for n, s, a in rng.sample(DISTRACTORS, 2)]
    functions = [bug, *others]
    rng.shuffle(functions)
    correct = "\n\n".join(f.source for f in functions)
    assert correct.count(bug.fixed) == 1  # the fix names one line
    buggy_source = correct.replace(bug.fixed, bug.buggy)
    expected, actual = bug.run(), bug.run(bug.source.replace(bug.fixed, bug.buggy))
    assert expected != actual  # the planted bug changes the tested call
    path = f"{package}/{module}.py"
    test_path = f"tests/test_{module}.py"
    repo = {
        "README.md": f"# {package}\n\nSmall helpers. Run the tests with `{TEST_COMMAND}`.\n",
        f"{package}/__init__.py": f'"""{package}: small helpers."""\n',
        path: buggy_source,
        "tests/__init__.py": "",
        test_path: _test_file(package, module, functions),
    }
    question = (
        f"In the `{package}` package, `{bug.call}` returns {actual!r}, but it should return "
        f"{expected!r}. Fix the bug in the package's code (not in its tests) so that "
        f"`{TEST_COMMAND}` passes."
    )
    return {
        "question": question,
        "repo": repo,
        "test_command": TEST_COMMAND,
        "test_files": ["tests/__init__.py", test_path],
        "bug": {"kind": kind, "path": path, "buggy": bug.buggy, "fixed": bug.fixed},
        "instance_id": f"buggy_repos-{kind}-{seed}",
    }


def make_dataset(out_dir: str | Path, train: int, val: int, seed: int = 0) -> dict[str, list[dict[str, Any]]]:
    """``train`` rows from seeds ``seed...`` and ``val`` from the seeds after them, written as
    ``swe_train.json`` and ``swe_val.json`` in ``out_dir``."""
    splits = {
        "train": [make_task(s) for s in range(seed, seed + train)],
        "val": [make_task(s) for s in range(seed + train, seed + train + val)],
    }
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in splits.items():
        (out / f"swe_{name}.json").write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return splits


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write the offline SWE task's data files.")
    parser.add_argument("out_dir")
    parser.add_argument("--train", type=int, default=64)
    parser.add_argument("--val", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    splits = make_dataset(args.out_dir, args.train, args.val, args.seed)
    print(f"wrote {len(splits['train'])} training and {len(splits['val'])} validation rows to {args.out_dir}")


if __name__ == "__main__":
    main()
