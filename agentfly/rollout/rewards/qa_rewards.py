"""Question-answering rewards: SQuAD token F1 and exact match, best over the gold answers.

Normalisation is the SQuAD v1.1 evaluation script's (lowercase, drop punctuation, drop the
articles a/an/the, collapse whitespace). As in the HotpotQA evaluation script (and AgentFly), a
"yes"/"no"/"noanswer" on either side scores F1 0 unless both sides agree exactly. If the
prediction holds ``<answer>...</answer>`` tags, the last tagged span is scored.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from agentfly.rollout.rewards.base import reward

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


def gold_answers(answer: Any = None, answers: Any = None) -> list[str]:
    """The row's gold answers as strings, from ``answer`` and/or ``answers``.

    Each may be a string, a number, a list/tuple/array of them, or a SQuAD-style mapping with a
    ``text`` list.

    Raises:
        ValueError: neither field holds an answer.
    """
    golds: list[str] = []
    for value in (answer, answers):
        golds.extend(_as_strings(value))
    if not golds:
        raise ValueError("QA reward needs a gold answer in row field 'answer' or 'answers'")
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


@reward(name="qa_f1_reward")
def qa_f1_reward(prediction: str, answer: Any = None, answers: Any = None) -> dict[str, float]:
    """Best token F1 of the prediction over the gold answers.

    Returns:
        ``{"reward": f1, "f1", "em", "precision", "recall"}``; precision and recall are those
        of the gold answer with the best F1, ``em`` is the best exact match.
    """
    pred = answer_span(prediction)
    golds = gold_answers(answer, answers)
    f1, precision, recall = max(f1_precision_recall(pred, g) for g in golds)
    em = max(exact_match(pred, g) for g in golds)
    return {"reward": f1, "f1": f1, "em": em, "precision": precision, "recall": recall}


@reward(name="qa_em_reward")
def qa_em_reward(prediction: str, answer: Any = None, answers: Any = None) -> dict[str, float]:
    """1.0 when the prediction matches any gold answer after SQuAD normalisation, else 0.0.

    Returns:
        ``{"reward": em, "em", "f1"}`` (the best F1, for logging).
    """
    pred = answer_span(prediction)
    golds = gold_answers(answer, answers)
    em = max(exact_match(pred, g) for g in golds)
    f1 = max(f1_precision_recall(pred, g)[0] for g in golds)
    return {"reward": em, "em": em, "f1": f1}
