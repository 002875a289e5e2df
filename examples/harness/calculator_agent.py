"""A calculator agent written against the OpenAI chat API alone: no agentfly import.

It asks the model a question with two OpenAI tools, ``calculator`` and ``answer``, runs the
calculator itself (exact arithmetic on Python's ``ast`` and ``fractions``), sends the results
back as ``tool`` messages, and stops when the model calls ``answer`` (or replies without a call,
or after three turns). Three ways to run it:

- by ``agentfly fit`` as ``agent.harness.command`` (``python examples/harness/calculator_agent.py``):
  it reads the task from ``$AGENTFLY_TASK``, talks to ``$OPENAI_BASE_URL`` with
  ``$OPENAI_API_KEY`` (the openai client reads both), and prints its answer as its last line;
- as ``agent.harness.function`` (``examples/harness/calculator_agent.py:solve``);
- against any OpenAI-compatible server, to evaluate a model on a data file:
  ``python examples/harness/calculator_agent.py --eval rows.json --base-url http://127.0.0.1:8000/v1``
  (``agentfly serve`` serves a trained checkpoint).
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import json
import operator
import os
import sys
from decimal import Decimal, localcontext
from fractions import Fraction

from openai import AsyncOpenAI

TOOLS = [
    {"type": "function", "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression exactly.",
        "parameters": {"type": "object", "properties": {
            "expression": {"type": "string", "description": "the expression, e.g. \"(3 + 4) * 12\"."}},
            "required": ["expression"]}}},
    {"type": "function", "function": {
        "name": "answer",
        "description": "Give the final answer to the user. Call this once, when you are done.",
        "parameters": {"type": "object", "properties": {
            "answer": {"type": "string", "description": "the final answer."}},
            "required": ["answer"]}}},
]
MAX_TURNS = 3
OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
             ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}


def _value(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return Fraction(str(node.value))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _value(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
        return OPERATORS[type(node.op)](_value(node.left), _value(node.right))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
        base, power = _value(node.left), _value(node.right)
        if power.denominator != 1 or abs(power) > 64:
            raise ValueError("only small integer powers are supported")
        return base ** int(power)
    raise ValueError(f"unsupported expression element {type(node).__name__}")


def calculate(expression: str) -> str:
    """The exact value of ``expression``: an integer, a decimal, or ``p/q``; an error message."""
    try:
        value = _value(ast.parse(expression.replace("^", "**").strip(), mode="eval").body)
    except ZeroDivisionError:
        return "Error: division by zero"
    except (SyntaxError, ValueError) as e:
        return f"Error: could not evaluate {expression.strip()!r}: {e}"
    if value.denominator == 1:
        return str(value.numerator)
    den = value.denominator
    while den % 2 == 0:
        den //= 2
    while den % 5 == 0:
        den //= 5
    with localcontext() as ctx:
        ctx.prec = 40
        decimal = Decimal(value.numerator) / Decimal(value.denominator)
    if den == 1:  # a terminating decimal, every digit
        return format(decimal, "f")
    return f"{value.numerator}/{value.denominator} ≈ {format(decimal, '.12g')}"


async def solve(task: dict, client: AsyncOpenAI, model: str = "agentfly", **sampling) -> str:
    """Answer ``task["question"]`` with the model behind ``client``; returns the answer.
    ``sampling``: more arguments of each request (``temperature=0`` to evaluate greedily)."""
    messages: list[dict] = [{"role": "user", "content": task["question"]}]
    content = ""
    for _ in range(MAX_TURNS):
        reply = await client.chat.completions.create(model=model, messages=messages, tools=TOOLS, **sampling)
        message = reply.choices[0].message
        content = message.content or ""
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return content
        for call in message.tool_calls:
            name = call.function.name
            try:
                args = json.loads(call.function.arguments)
            except json.JSONDecodeError:
                args = {}
            if name == "answer":
                return str(args.get("answer", ""))
            if name == "calculator":
                result = calculate(str(args.get("expression", "")))
            else:
                result = f"Error: no tool named {name!r} is available (tools: calculator, answer)."
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return content


async def evaluate(path: str, base_url: str, api_key: str, model: str, limit: int | None) -> float:
    """Greedy accuracy on the rows of ``path`` (``question`` and ``answer`` fields), one chain each."""
    with open(path) as f:
        rows = json.load(f)[:limit]
    client = AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    answers = await asyncio.gather(*(solve(row, client, model, temperature=0) for row in rows))
    right = sum(a.strip() == str(row["answer"]).strip() for a, row in zip(answers, rows, strict=True))
    await client.close()
    return right / len(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--eval", help="a JSON list of rows to evaluate on (else: one task from $AGENTFLY_TASK)")
    parser.add_argument("--base-url", default=os.environ.get("OPENAI_BASE_URL"))
    parser.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY", "none"))
    parser.add_argument("--model", default="agentfly")
    parser.add_argument("--limit", type=int)
    args = parser.parse_args()
    if args.eval:
        accuracy = asyncio.run(evaluate(args.eval, args.base_url, args.api_key, args.model, args.limit))
        print(f"accuracy {accuracy:.3f}")
        return
    with open(os.environ["AGENTFLY_TASK"]) as f:
        task = json.load(f)

    async def one() -> str:
        async with AsyncOpenAI(base_url=args.base_url, api_key=args.api_key, max_retries=0) as client:
            return await solve(task, client, args.model)

    print(asyncio.run(one()).replace("\n", " "))


if __name__ == "__main__":
    sys.exit(main())
