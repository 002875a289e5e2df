"""Write the SmolLM2 example's data: supervised tool-use traces, RL rows and held-out rows.

    python examples/smollm2_calculator/make_data.py [--out runs/smollm2_calculator/data]

- ``sft_train.jsonl`` / ``sft_val.jsonl``: conversations in OpenAI's messages format (the
  question, a ``calculator`` call, its result, an ``answer`` call) on the three structures of
  :data:`problems.SFT_KINDS`; a quarter first compute a wrong expression (an operand's digits
  swapped), say so and compute again, so the model also sees a correction.
- ``rl_train.jsonl``: questions of all seven structures (``question``, ``answer``).
- ``held_out.jsonl``: 100 questions of all seven structures that no other file holds.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from problems import Problem, splits

#: the system prompt of both stages (agent.init_config.system_prompt in sft.yaml and rl.yaml)
SYSTEM = (
    "Solve the problem with the calculator, then give the number with answer. Call a tool as "
    '<tool_call>{"name": "calculator", "arguments": {"expression": "12*3+4"}}</tool_call> or '
    '<tool_call>{"name": "answer", "arguments": {"answer": "40"}}</tool_call>.'
)


def _call(name: str, **arguments: str) -> dict:
    return {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
    ]}


def _swapped(expression: str, rng: random.Random) -> tuple[str, str, str] | None:
    """``expression`` with one operand's last two digits swapped: (wrong, operand, its typo)."""
    operands = [t for t in expression.replace("(", " ").replace(")", " ").replace("*", " ")
                .replace("+", " ").replace("-", " ").split() if len(t) >= 2 and t[-1] != t[-2]]
    if not operands:
        return None
    right = rng.choice(operands)
    typo = right[:-2] + right[-1] + right[-2]
    return expression.replace(right, typo, 1), right, typo


def conversation(p: Problem, rng: random.Random, correction: bool) -> dict:
    value = lambda e: str(eval(e, {"__builtins__": {}}))  # noqa: E731  (our own integer expressions)
    messages: list[dict] = [{"role": "user", "content": p["question"]}]
    wrong = _swapped(p["expression"], rng) if correction else None
    if wrong is not None:
        expression, right, typo = wrong
        messages += [_call("calculator", expression=expression), {"role": "tool", "content": value(expression)}]
        fix = _call("calculator", expression=p["expression"])
        fix["content"] = f"I typed {typo} instead of {right}. Again:"
        messages.append(fix)
    else:
        messages.append(_call("calculator", expression=p["expression"]))
    messages += [{"role": "tool", "content": p["answer"]}, _call("answer", answer=p["answer"])]
    return {"messages": messages}


def write(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="runs/smollm2_calculator/data")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sets = splits(args.seed)
    rng = random.Random(args.seed + 1)
    convs = [conversation(p, rng, correction=i % 4 == 3) for i, p in enumerate(sets["sft"])]
    write(out / "sft_train.jsonl", convs[:-16])
    write(out / "sft_val.jsonl", convs[-16:])
    task = lambda p: {"question": p["question"], "answer": p["answer"], "kind": p["kind"]}  # noqa: E731
    write(out / "rl_train.jsonl", [task(p) for p in sets["rl"]])
    write(out / "held_out.jsonl", [task(p) for p in sets["held_out"]])
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
