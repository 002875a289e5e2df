"""Math rewards: answer extraction and equivalence through math-verify.

The answer is read from the prediction as: the content of the last ``\\boxed{...}`` (braces
balanced), else the text after the last "answer is" / "answer:" / "####", else the last number.
The gold ``answer`` may be a bare value, a GSM8K solution ending in ``#### 42``, or a MATH
solution with a ``\\boxed{}``. Two answers are equal when their normalised strings match or
math-verify says so (``verify(gold, pred)``; the order matters, gold first), trying each side
wrapped in ``$...$`` (math-verify's LaTeX extractor wants delimiters) and then bare.

Departures from AgentFly's ``math_reward.py``: equivalence is math-verify only (no sympy
``parse_latex`` fallback), with math-verify's signal-based timeouts off because rewards run in a
worker thread (``base.py`` times the whole call out instead). ``math_reward_string_equal`` is
not AgentFly's tutorial function (last integer, gated on a tool call); it compares the
extracted answer as a string, without tool gating; AgentFly's function is
``math_string_equal_reward_tool``. ``math_reward_format`` is not in the AgentFly sources we could
find; its definition here is ours (see its docstring). The gated rewards (``*_tool``,
``*_think``, ``*_thought_*``) report ``acc`` as the answer's correctness even where the gate
zeroes the reward (AgentFly's ``math_equal_reward_think`` reports 0 there).
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any

from agentfly.rollout.rewards.base import reward
from agentfly.rollout.rewards.chain import assistant_texts, used_tool

if TYPE_CHECKING:
    from agentfly.rollout.rewards.chain import Chain

MATH_TIMEOUT_S = 20.0
_PRELOAD = ("math_verify",)  # what the rewards import on first use: worker processes at start

_BOX_COMMANDS = ("\\boxed", "\\fbox")
_ANSWER_MARKER = re.compile(r"(?:answer\s*(?:is|:)|####)\s*:?\s*(?P<value>[^\n]*)", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?(?:/\d+)?|-?\.\d+")
_SENTENCE_END = re.compile(r"\.(?:\s|$)")


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``, braces balanced.

    Also reads the brace-less form ``\\boxed 5``. Returns None when there is none or the last
    one is unclosed.
    """
    start = max(text.rfind(cmd) for cmd in _BOX_COMMANDS)
    if start < 0:
        return None
    rest = text[start:]
    rest = rest[len("\\boxed") :] if rest.startswith("\\boxed") else rest[len("\\fbox") :]
    if rest.startswith(" "):
        token = rest.split(maxsplit=1)
        return token[0].rstrip("$.") if token else None
    if not rest.startswith("{"):
        return None
    depth = 0
    for i, ch in enumerate(rest):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return rest[1:i]
    return None


def extract_answer(text: str) -> str:
    """The final answer stated in ``text`` ("" when none); see the module docstring for the order."""
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed.strip()
    markers = list(_ANSWER_MARKER.finditer(text))
    if markers:
        value = _SENTENCE_END.split(markers[-1].group("value"), maxsplit=1)[0]
        value = _strip_decorations(value)
        if value:
            return value
    numbers = _NUMBER.findall(text)
    return numbers[-1].replace(",", "") if numbers else ""


def gold_answer(answer: Any) -> str:
    """The reference value in a row's ``answer``: after ``####`` or inside ``\\boxed{}`` if present."""
    text = str(answer).strip()
    if "####" in text:
        return text.rsplit("####", 1)[1].strip().replace(",", "")
    boxed = last_boxed(text)
    return boxed.strip() if boxed is not None else text


def _strip_decorations(text: str) -> str:
    text = text.strip().strip("*").strip()  # markdown bold
    if text.startswith("$") and text.endswith("$"):
        text = text.strip("$").strip()
    return text.rstrip(".").strip()


def normalize_string(text: str) -> str:
    """Whitespace, surrounding ``$``, ``\\boxed{}``, trailing period and thousands commas removed."""
    boxed = last_boxed(text)
    text = _strip_decorations(boxed if boxed is not None else text)
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)
    return re.sub(r"\s+", "", text)


class _DropTimeoutWarning(logging.Filter):
    """math-verify warns that its timeouts are off; ours is in ``compute_reward``."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Timeout is disabled" not in record.getMessage()


_filter_installed = False


def is_equivalent(gold: str, prediction: str) -> bool:
    """Whether answer ``prediction`` equals answer ``gold`` (both already extracted)."""
    if not prediction.strip() or not gold.strip():
        return False
    if normalize_string(gold) == normalize_string(prediction):
        return True
    global _filter_installed
    if not _filter_installed:
        for name in ("math_verify.parser", "math_verify.grader"):
            logging.getLogger(name).addFilter(_DropTimeoutWarning())
        _filter_installed = True
    from math_verify import parse, verify  # heavy (sympy): imported on first use

    gold, prediction = _strip_decorations(gold), _strip_decorations(prediction)
    for g, p in ((f"${gold}$", f"${prediction}$"), (gold, prediction)):
        parsed_gold = parse(g, parsing_timeout=None)
        parsed_pred = parse(p, parsing_timeout=None)
        if parsed_gold and parsed_pred and verify(parsed_gold, parsed_pred, timeout_seconds=None):
            return True
    return False


def is_correct(prediction: str, answer: Any) -> bool:
    """Whether the answer stated in ``prediction`` equals the row's ``answer``."""
    return is_equivalent(gold_answer(answer), extract_answer(prediction))


def _gated(acc: float, gate: bool) -> float:
    """AgentFly's gated score: 0 when the gate fails, else 1 if right and 0.1 if wrong."""
    return (1.0 if acc else 0.1) if gate else 0.0


@reward(
    name="math_equal_reward", timeout=MATH_TIMEOUT_S, aliases=("math_reward",), preload=_PRELOAD
)
def math_equal_reward(prediction: str, answer: Any) -> dict[str, float]:
    """1.0 when the prediction's answer is mathematically equal to ``answer``, else 0.0.

    Returns:
        ``{"reward": r, "acc": r}``.
    """
    acc = float(is_correct(prediction, answer))
    return {"reward": acc, "acc": acc}


@reward(
    name="math_equal_reward_tool",
    timeout=MATH_TIMEOUT_S,
    aliases=("math_reward_tool",),
    preload=_PRELOAD,
)
def math_equal_reward_tool(
    prediction: str, answer: Any, trajectory: Chain = None
) -> dict[str, float]:
    """Correctness gated on tool use: 0 without a tool call, 0.1 with one but wrong, 1 right.

    Returns:
        ``{"reward": ..., "acc": 1.0 if right else 0.0, "used_tool": 1.0 or 0.0}``.
    """
    acc = float(is_correct(prediction, answer))
    tool = used_tool(trajectory)
    return {"reward": _gated(acc, tool), "acc": acc, "used_tool": float(tool)}


@reward(name="math_reward_string_equal", timeout=MATH_TIMEOUT_S)
def math_reward_string_equal(prediction: str, answer: Any) -> dict[str, float]:
    """1.0 when the answer equals ``answer`` as a string, else 0.0 (no symbolic equivalence).

    Both sides lose whitespace, surrounding ``$``, ``\\boxed{}``, a trailing period and thousands
    commas; a GSM8K gold is read after ``####``. The whole prediction or the answer extracted
    from it may match.

    Returns:
        ``{"reward": r, "acc": r}``.
    """
    gold = normalize_string(gold_answer(answer))
    candidates = (normalize_string(prediction), normalize_string(extract_answer(prediction)))
    acc = float(bool(gold) and gold in candidates)
    return {"reward": acc, "acc": acc}


@reward(name="math_reward_format", timeout=MATH_TIMEOUT_S, preload=_PRELOAD)
def math_reward_format(prediction: str, answer: Any) -> dict[str, float]:
    """Correctness with a format requirement: the final answer must be in ``\\boxed{}``.

    1.0 when the last ``\\boxed{}`` holds the right answer, 0.1 when a ``\\boxed{}`` holds a
    wrong one, 0.0 without any ``\\boxed{}`` (even if the answer is stated otherwise).

    Returns:
        ``{"reward": ..., "acc": correctness under any answer form, "format": 1.0 if boxed}``.
    """
    boxed = last_boxed(prediction)
    acc = float(is_correct(prediction, answer))
    if boxed is None:
        return {"reward": 0.0, "acc": acc, "format": 0.0}
    return {"reward": 1.0 if acc else 0.1, "acc": acc, "format": 1.0}


@reward(name="math_reward_thought_with_tool", timeout=MATH_TIMEOUT_S, preload=_PRELOAD)
def math_reward_thought_with_tool(
    prediction: str, answer: Any, trajectory: Chain = None
) -> dict[str, float]:
    """Correctness gated on a tool call and on every assistant turn opening with "Thought".

    The ReAct format: each assistant turn, stripped and lowercased, starts with "thought".
    0 when the chain called no tool or a turn breaks the format, else 1 if right, 0.1 if wrong.

    Returns:
        ``{"reward": ..., "acc": 1.0 if right else 0.0, "used_tool", "thought": 1.0 or 0.0}``.
    """
    acc = float(is_correct(prediction, answer))
    tool = used_tool(trajectory)
    thought = all(t.strip().lower().startswith("thought") for t in assistant_texts(trajectory))
    return {
        "reward": _gated(acc, tool and thought),
        "acc": acc,
        "used_tool": float(tool),
        "thought": float(thought),
    }


@reward(name="math_equal_reward_think", timeout=MATH_TIMEOUT_S, preload=_PRELOAD)
def math_equal_reward_think(
    prediction: str, answer: Any, trajectory: Chain = None
) -> dict[str, float]:
    """Correctness gated on a tool call and on every assistant turn closing a ``<think>`` block.

    A turn thinks when it holds ``</think>`` (AgentFly reads ``<think>...</think>``, or text up
    to ``</think>`` when the template opened the block). 0 when the chain called no tool or a
    turn does not think, else 1 if right, 0.1 if wrong.

    Returns:
        ``{"reward": ..., "acc": 1.0 if right else 0.0, "used_tool", "think": 1.0 or 0.0}``.
    """
    acc = float(is_correct(prediction, answer))
    tool = used_tool(trajectory)
    think = all("</think>" in t for t in assistant_texts(trajectory))
    return {
        "reward": _gated(acc, tool and think),
        "acc": acc,
        "used_tool": float(tool),
        "think": float(think),
    }


@reward(name="math_string_equal_reward_tool", timeout=MATH_TIMEOUT_S)
def math_string_equal_reward_tool(
    prediction: str, answer: Any, trajectory: Chain = None
) -> dict[str, float]:
    """The prediction's last run of digits equal to ``answer`` as a string, gated on a tool call.

    No normalisation: "-3" reads as "3" and "2.5" as "5", as in AgentFly. 0 without a tool call,
    else 1 if equal, 0.1 if not. ``answer`` is compared as ``str(answer).strip()`` (AgentFly
    compares the raw value, so an integer gold never matches there).

    Returns:
        ``{"reward": ..., "acc": 1.0 if equal else 0.0, "used_tool": 1.0 or 0.0}``.
    """
    digits = re.findall(r"\d+", prediction)
    acc = float(bool(digits) and digits[-1] == str(answer).strip())
    tool = used_tool(trajectory)
    return {"reward": _gated(acc, tool), "acc": acc, "used_tool": float(tool)}
