"""Generate the demo's arithmetic task: ``agentfly/demo/data/{train,val}.json``, and the
conversations of ``agentfly sft``'s demo (``conf/examples/sft_demo.yaml``):
``sft_{train,val}.jsonl``.

Problems a tiny model cannot do in its head but can copy into a calculator: ``a*b`` (35%),
``a+b`` / ``a-b`` (15%), ``a*b+c`` / ``a*b-c`` (35%) and ``(a+b)*c`` / ``(a-b)*c`` (15%), every
operand of 1 to 4 digits (the digit count drawn first, so short and long operands are equally
common). A row is ``{"question": "What is 37*4+12?", "answer": "160"}``; the answer is the exact
integer as a string (negative for some differences).

A conversation solves a row as the demo's agent should: the question, a ``calculator`` call
with the question's expression, its result, an ``answer`` call with it; in OpenAI's messages
format (structured ``tool_calls``), for the first ``NUM_SFT_TRAIN`` training and
``NUM_SFT_VAL`` validation rows.

Seeded and deterministic: the validation rows are drawn first, then the training rows, skipping
any question already drawn, so the splits never overlap and neither repeats a question.

    python scripts/make_demo_data.py                 # writes agentfly/demo/data/
    python scripts/make_demo_data.py --out /tmp/x    # elsewhere
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "agentfly" / "demo" / "data"
SEED = 0
NUM_TRAIN = 2000
NUM_VAL = 100
NUM_SFT_TRAIN = 64
NUM_SFT_VAL = 16

# (kind, weight): the notes' mix
KINDS = (("mul", 35), ("add_sub", 15), ("mul_add_sub", 35), ("add_sub_mul", 15))


def operand(rng: random.Random) -> int:
    """An integer of 1 to 4 digits, the number of digits uniform."""
    digits = rng.randint(1, 4)
    return rng.randint(0 if digits == 1 else 10 ** (digits - 1), 10**digits - 1)


def make_problem(rng: random.Random) -> tuple[str, int]:
    """One problem of the task mix: the expression (as written in the question and in the
    calculator call) and its exact value."""
    kind = rng.choices([k for k, _ in KINDS], weights=[w for _, w in KINDS])[0]
    a, b, c = operand(rng), operand(rng), operand(rng)
    sign = rng.choice("+-")
    a_sign_b = a + b if sign == "+" else a - b
    if kind == "mul":
        return f"{a}*{b}", a * b
    if kind == "add_sub":
        return f"{a}{sign}{b}", a_sign_b
    if kind == "mul_add_sub":
        return f"{a}*{b}{sign}{c}", a * b + c if sign == "+" else a * b - c
    return f"({a}{sign}{b})*{c}", a_sign_b * c


def question(expression: str) -> str:
    return f"What is {expression}?"


def make_rows(rng: random.Random, count: int, seen: set[str]) -> list[dict[str, str]]:
    """``count`` rows whose questions are not in ``seen`` (which gains them)."""
    rows = []
    while len(rows) < count:
        expression, value = make_problem(rng)
        text = question(expression)
        if text in seen:
            continue
        seen.add(text)
        rows.append({"question": text, "answer": str(value)})
    return rows


def make_splits(
    seed: int = SEED, num_train: int = NUM_TRAIN, num_val: int = NUM_VAL
) -> dict[str, list[dict[str, str]]]:
    """The train and validation rows (validation drawn first; no question in both)."""
    rng = random.Random(seed)
    seen: set[str] = set()
    val = make_rows(rng, num_val, seen)
    train = make_rows(rng, num_train, seen)
    return {"train": train, "val": val}


def dumps(rows: list[dict[str, str]]) -> str:
    return json.dumps(rows, indent=1, ensure_ascii=False) + "\n"


def tool_call(name: str, **arguments: str) -> dict[str, object]:
    """A structured tool call, as OpenAI's messages write it (the arguments a JSON string)."""
    return {"type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def conversation(row: dict[str, str]) -> dict[str, list[dict[str, object]]]:
    """A row solved with the tools: the calculator's result is the row's exact answer."""
    expression = row["question"].removeprefix("What is ").removesuffix("?")
    return {"messages": [
        {"role": "user", "content": row["question"]},
        {"role": "assistant", "content": "", "tool_calls": [tool_call("calculator", expression=expression)]},
        {"role": "tool", "content": row["answer"]},
        {"role": "assistant", "content": "", "tool_calls": [tool_call("answer", answer=row["answer"])]},
    ]}


def write_splits(out: Path, seed: int = SEED) -> dict[str, Path]:
    """Write ``train.json``, ``val.json`` and the conversations ``sft_train.jsonl``,
    ``sft_val.jsonl`` into ``out``; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    sizes = {"train": NUM_SFT_TRAIN, "val": NUM_SFT_VAL}
    for name, rows in make_splits(seed).items():
        paths[name] = out / f"{name}.json"
        paths[name].write_text(dumps(rows), encoding="utf-8")
        lines = [json.dumps(conversation(row)) + "\n" for row in rows[: sizes[name]]]
        paths[f"sft_{name}"] = out / f"sft_{name}.jsonl"
        paths[f"sft_{name}"].write_text("".join(lines), encoding="utf-8")
    return paths


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory")
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args(argv)
    for name, path in write_splits(args.out, args.seed).items():
        print(f"{name}: {path}")


if __name__ == "__main__":
    main()
