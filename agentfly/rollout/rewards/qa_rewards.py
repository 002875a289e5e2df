"""Question-answering rewards: SQuAD token F1 and exact match, best over the gold answers.

Normalisation is the SQuAD v1.1 evaluation script's (lowercase, drop punctuation, drop the
articles a/an/the, collapse whitespace). As in the HotpotQA evaluation script (and AgentFly), a
"yes"/"no"/"noanswer" on either side scores F1 0 unless both sides agree exactly. If the
prediction holds ``<answer>...</answer>`` tags, the last tagged span is scored.

The gold answers are read from the row's ``answer``, ``answers`` and ``golden_answers``
(AgentFly's Search-R1 rows), each a string or a list. Departures from AgentFly's
``qa_reward.py``: every reward scores the best over all gold answers and the last tagged span
(AgentFly's ``qa_f1_reward*`` and ``qa_em_reward_tool_call`` score the whole response, the
first two against one gold string; its ``qa_em_reward`` and ``qa_em_format_reward`` the first
tagged span); a row without a gold answer fails the reward instead of scoring 0.
``qa_em_format_reward``'s format gate is the one AgentFly defined for it (answer tags, a tool
call, ``<think>`` in every earlier turn): AgentFly's current code reads a key its format check
no longer returns, and raises.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from agentfly.rollout.rewards.base import reward
from agentfly.rollout.rewards.chain import (
    assistant_texts,
    tool_call_answer,
    tool_call_count,
    used_tool,
)

if TYPE_CHECKING:
    from agentfly.rollout.rewards.chain import Chain

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_SPECIAL = frozenset(("yes", "no", "noanswer"))


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lowercase, no punctuation, no articles, single spaces."""
    text = str(text).lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def f1_precision_recall(prediction: str, gold: str) -> tuple[float, float, float]:
    """Token-level ``(f1, precision, recall)`` of ``prediction`` against one ``gold`` answer."""
    pred, ref = normalize_answer(prediction), normalize_answer(gold)
    if (pred in _SPECIAL or ref in _SPECIAL) and pred != ref:
        return 0.0, 0.0, 0.0
    pred_tokens, ref_tokens = pred.split(), ref.split()
    if not pred_tokens and not ref_tokens:
        return 1.0, 1.0, 1.0
    common = sum((Counter(pred_tokens) & Counter(ref_tokens)).values())
    if common == 0:
        return 0.0, 0.0, 0.0
    precision, recall = common / len(pred_tokens), common / len(ref_tokens)
    return 2 * precision * recall / (precision + recall), precision, recall


def exact_match(prediction: str, gold: str) -> float:
    """1.0 when both normalise to the same string, else 0.0."""
    return float(normalize_answer(prediction) == normalize_answer(gold))


def gold_answers(answer: Any = None, answers: Any = None, golden_answers: Any = None) -> list[str]:
    """The row's gold answers as strings, from ``answer``, ``answers`` and ``golden_answers``.

    Each may be a string, a number, a list/tuple/array of them, or a SQuAD-style mapping with a
    ``text`` list.

    Raises:
        ValueError: no field holds an answer.
    """
    golds: list[str] = []
    for value in (answer, answers, golden_answers):
        golds.extend(_as_strings(value))
    if not golds:
        raise ValueError(
            "QA reward needs a gold answer in row field 'answer', 'answers' or 'golden_answers'"
        )
    return golds


def _as_strings(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, Mapping):
        return _as_strings(value.get("text"))
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        return [value.decode() if isinstance(value, bytes) else str(value)]
    return [s for item in value for s in _as_strings(item)]


def answer_span(prediction: str) -> str:
    """The last ``<answer>...</answer>`` span of ``prediction``, else all of it."""
    tagged = _ANSWER_TAG.findall(prediction)
    return tagged[-1] if tagged else prediction


def qa_scores(prediction: str, golds: list[str]) -> dict[str, float]:
    """Best F1 and exact match of ``prediction`` over ``golds``.

    Returns:
        ``{"f1", "em", "precision", "recall"}``; precision and recall are those of the gold
        answer with the best F1, ``em`` is the best exact match.
    """
    f1, precision, recall = max(f1_precision_recall(prediction, g) for g in golds)
    em = max(exact_match(prediction, g) for g in golds)
    return {"f1": f1, "em": em, "precision": precision, "recall": recall}


@reward(name="qa_f1_reward")
def qa_f1_reward(
    prediction: str, answer: Any = None, answers: Any = None, golden_answers: Any = None
) -> dict[str, float]:
    """Best token F1 of the prediction over the gold answers.

    Returns:
        ``{"reward": f1, "f1", "em", "precision", "recall"}`` (see :func:`qa_scores`).
    """
    scores = qa_scores(answer_span(prediction), gold_answers(answer, answers, golden_answers))
    return {"reward": scores["f1"], **scores}


@reward(name="qa_em_reward")
def qa_em_reward(
    prediction: str, answer: Any = None, answers: Any = None, golden_answers: Any = None
) -> dict[str, float]:
    """1.0 when the prediction matches any gold answer after SQuAD normalisation, else 0.0.

    Returns:
        ``{"reward": em, "em", "f1"}`` (the best F1, for logging).
    """
    scores = qa_scores(answer_span(prediction), gold_answers(answer, answers, golden_answers))
    return {"reward": scores["em"], "em": scores["em"], "f1": scores["f1"]}


@reward(name="qa_f1_reward_tool")
def qa_f1_reward_tool(
    prediction: str,
    answer: Any = None,
    answers: Any = None,
    golden_answers: Any = None,
    trajectory: Chain = None,
) -> dict[str, float]:
    """``qa_f1_reward`` when the chain made at least two tool calls, else 0 on every metric.

    Two, because the call that gives the answer (the ``answer`` tool) counts: one search or more
    must come before it.

    Returns:
        ``{"reward": f1, "f1", "em", "precision", "recall"}``, all 0.0 below two calls.
    """
    golds = gold_answers(answer, answers, golden_answers)
    if tool_call_count(trajectory) <= 1:
        return {"reward": 0.0, "f1": 0.0, "em": 0.0, "precision": 0.0, "recall": 0.0}
    scores = qa_scores(answer_span(prediction), golds)
    return {"reward": scores["f1"], **scores}


@reward(name="qa_em_format_reward")
def qa_em_format_reward(
    prediction: str,
    answer: Any = None,
    answers: Any = None,
    golden_answers: Any = None,
    trajectory: Chain = None,
) -> dict[str, float]:
    """Exact match gated on the Search-R1 format: 1 if right, 0.1 if wrong, 0 if ill-formed.

    Well-formed: the prediction holds ``<answer>`` and ``</answer>``, the chain called a tool,
    and every assistant turn but the last (the answer) that has text holds ``<think>`` and
    ``</think>``.

    Returns:
        ``{"reward": ..., "em", "f1", "fmt": 1.0 if well-formed, "fmt_think", "fmt_answer_tags",
        "fmt_tool"}`` (the three parts of the format, 1.0 or 0.0 each).
    """
    scores = qa_scores(answer_span(prediction), gold_answers(answer, answers, golden_answers))
    tags = "<answer>" in prediction and "</answer>" in prediction
    tool = used_tool(trajectory)
    earlier_turns = assistant_texts(trajectory)[:-1]
    think = all("<think>" in t and "</think>" in t for t in earlier_turns if t)
    well_formed = tags and tool and think
    em = scores["em"]
    return {
        "reward": (1.0 if em else 0.1) if well_formed else 0.0,
        "em": em,
        "f1": scores["f1"],
        "fmt": float(well_formed),
        "fmt_think": float(think),
        "fmt_answer_tags": float(tags),
        "fmt_tool": float(tool),
    }


@reward(name="qa_em_reward_tool_call")
def qa_em_reward_tool_call(
    prediction: str,
    answer: Any = None,
    answers: Any = None,
    golden_answers: Any = None,
    trajectory: Chain = None,
) -> dict[str, float]:
    """Exact match of the answer the last turn gave through a tool call, else of the prediction.

    The answer is read as :func:`agentfly.rollout.rewards.chain.tool_call_answer` reads it (the
    ``answer`` tool's argument). No gate: the tool-call metrics are logged, not rewarded.

    Returns:
        ``{"reward": em, "em", "f1", "has_tool_calling", "has_tool_call_answer"}``.
    """
    via_tool = tool_call_answer(trajectory)
    predicted = answer_span(via_tool if via_tool is not None else prediction)
    scores = qa_scores(predicted, gold_answers(answer, answers, golden_answers))
    return {
        "reward": scores["em"],
        "em": scores["em"],
        "f1": scores["f1"],
        "has_tool_calling": float(used_tool(trajectory)),
        "has_tool_call_answer": float(via_tool is not None),
    }
