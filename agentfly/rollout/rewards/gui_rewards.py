"""Vision-language rewards, AgentFly's names: ``gui_reward``, ``ok_vqa_reward``,
``infoseek_reward``; and ``gui_episode_reward`` (AgentFly has no GUI environment).

``gui_reward`` (AgentFly's ``rewards/gui_reward.py``) scores one action, read from the
prediction as AgentFly's parser reads it (:func:`agentfly.envs.ui_actions.parse_actions`, pixel
coordinates, its first action), against the row's ``gt_action``, ``gt_bbox`` and
``gt_input_text``::

    reward   = 0.8 * accuracy + 0.2 * format
    format   = 1 if the prediction holds an action AgentFly's parser reads, else 0
    accuracy = 0.5 * [action type matches] + 0.5 * [its parameter matches, same type only]

with click variants one type (``left_single``, ``left_double``, ``right_single``), and the
parameter: a click's point (its box's centre) inside ``gt_bbox`` (``[x1, y1, x2, y2]``, edges
included; a 2-number ``gt_bbox`` is the point itself), a typed text whose token-set F1 with
``gt_input_text`` (lowercase, punctuation dropped) is at least 0.5, a scroll's direction equal
to ``gt_input_text`` (case aside; ``down`` when the action names none); an empty ``gt_bbox`` or
``gt_input_text`` (or ``"no input text"``) asks for no parameter. Other types earn no parameter
half. An empty prediction is replaced by the chain's last assistant text, as AgentFly does.

Departures from AgentFly: a click scores by whether it lands inside the box, not by its
distance to the box's centre (under 5 % of the diagonal, in a frame where AgentFly divides the
predicted pixels by 1920x1080 but takes ``gt_bbox`` as already fractions, so pixel boxes never
match); the parameter half needs the action type to match (AgentFly gives it on a click row
without ``gt_bbox`` to any response, an unreadable one included, and scores a box given to any
action); a row without any ``gt_*`` field fails the reward instead of scoring 0; AgentFly's
extras ``f1``/``precision``/``recall`` (the response against the JSON of the ground truth) are
left out, ``action_match`` added.

``ok_vqa_reward`` and ``infoseek_reward`` are AgentFly's (``rewards/qa_reward.py``) on the QA
rewards' normalisation and F1 (:mod:`agentfly.rollout.rewards.qa_rewards`, the last
``<answer>`` span if tagged): OK-VQA's reward is the best F1 over the row's ``answers`` (not the
VQA accuracy ``min(#humans who gave the answer / 3, 1)``, which is logged as ``vqa_acc``);
InfoSeek's is ``0.8 * best F1 + 0.2 * [more than one tool call]`` over ``answer`` and the
strings of ``answer_eval`` (its numeric-range entries are skipped, as AgentFly skips them;
AgentFly reads strings only when the first entry is one and raises on an empty list).
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

from agentfly.envs.ui_actions import NORMALIZED_TYPES, UIAction, parse_actions, read_turn
from agentfly.rollout.rewards.base import reward
from agentfly.rollout.rewards.chain import assistant_texts, tool_call_count
from agentfly.rollout.rewards.env_rewards import episode
from agentfly.rollout.rewards.qa_rewards import answer_span, exact_match, gold_answers, qa_scores

if TYPE_CHECKING:
    from agentfly.rollout.rewards.chain import Chain

NO_INPUT_TEXT = "no input text"
"""AgentFly's ``gt_input_text`` for an action without text."""


def gui_token_f1(prediction: str, gold: str) -> float:
    """AgentFly's GUI text F1: over the sets of lowercase words, punctuation dropped (1.0 when
    both are empty)."""
    pred, ref = (set(re.sub(r"[^\w\s]", "", t).lower().split()) for t in (prediction, gold))
    if not pred and not ref:
        return 1.0
    common = len(pred & ref)
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def in_box(point: tuple[float, float] | None, box: list[float]) -> bool:
    """Whether ``point`` lies in ``box`` (``[x1, y1, x2, y2]``, edges included; ``[x, y]``: that point)."""
    if point is None:
        return False
    if len(box) == 2:
        box = [box[0], box[1], box[0], box[1]]
    x1, x2 = sorted((box[0], box[2]))
    y1, y2 = sorted((box[1], box[3]))
    return x1 <= point[0] <= x2 and y1 <= point[1] <= y2


def parameter_matches(action: UIAction, gt_type: str, gt_bbox: list[float], gt_text: str) -> bool:
    """Whether ``action``'s parameter is the ground truth's (an action of ``gt_type``)."""
    if gt_type == "click":
        return not gt_bbox or in_box(action.point, gt_bbox)
    if gt_type == "type":
        return not gt_text or gui_token_f1(str(action.inputs.get("content", "")), gt_text) >= 0.5
    if gt_type == "scroll":
        return not gt_text or str(action.inputs.get("direction", "down")).lower() == gt_text.lower()
    return False


@reward(name="gui_reward", runs_in="thread")
def gui_reward(
    prediction: str,
    gt_action: str = "",
    gt_bbox: Any = None,
    gt_input_text: str = "",
    trajectory: Chain = None,
) -> dict[str, float]:
    """One GUI action against the row's ground truth (the formula in the module docstring).

    Returns:
        ``{"reward", "format", "accuracy", "action_match"}``.

    Raises:
        ValueError: the row has no ``gt_action``, ``gt_bbox`` nor ``gt_input_text``.
    """
    gt_bbox = [float(v) for v in (gt_bbox.tolist() if hasattr(gt_bbox, "tolist") else gt_bbox or [])]
    gt_text = "" if gt_input_text in (None, NO_INPUT_TEXT) else str(gt_input_text)
    if not gt_action and not gt_bbox and not gt_text:
        raise ValueError("gui_reward needs the row's gt_action, gt_bbox or gt_input_text")
    if not (prediction or "").strip():
        prediction = next((t for t in reversed(assistant_texts(trajectory)) if t.strip()), "")
    actions = parse_actions(prediction)
    fmt = 1.0 if actions else 0.0
    gt_type = NORMALIZED_TYPES.get(str(gt_action).lower(), str(gt_action).lower())
    type_match = bool(actions) and actions[0].action_type == gt_type
    param = type_match and parameter_matches(actions[0], gt_type, gt_bbox, gt_text)
    accuracy = 0.5 * type_match + 0.5 * param
    return {"reward": 0.8 * accuracy + 0.2 * fmt, "format": fmt, "accuracy": accuracy,
            "action_match": float(type_match)}


@reward(name="gui_point_reward", runs_in="thread")
def gui_point_reward(prediction: str, gt_bbox: Any = None, trajectory: Chain = None) -> dict[str, float]:
    """The chain's first action (its first assistant turn, where ``gt_bbox`` holds: the first
    screen; the prediction when the chain has no turns), a click scored by how near it lands to
    the row's ``gt_bbox``: 1.0 inside the box, else
    ``exp(-((x - cx)**2 / (2 * w**2) + (y - cy)**2 / (2 * h**2)))`` about the box's centre
    ``(cx, cy)``, ``w`` and ``h`` its width and height: GUI-G²'s Gaussian point reward (a dense
    grounding reward whose spread follows the element's size). No click, or no point: 0.

    Returns:
        ``{"reward", "acc"}``: ``acc`` is 1.0 for a click inside the box (the click accuracy).

    Raises:
        ValueError: the row has no 4-number ``gt_bbox``.
    """
    box = [float(v) for v in (gt_bbox.tolist() if hasattr(gt_bbox, "tolist") else gt_bbox or [])]
    if len(box) != 4:
        raise ValueError(f"gui_point_reward needs the row's gt_bbox as [x1, y1, x2, y2], got {gt_bbox!r}")
    text = next(iter(assistant_texts(trajectory)), prediction or "")
    actions = read_turn(text)  # as the gui agent reads the turn
    point = actions[0].point if actions and actions[0].action_type == "click" else None
    if point is None:
        return {"reward": 0.0, "acc": 0.0}
    if in_box(point, box):
        return {"reward": 1.0, "acc": 1.0}
    x1, x2 = sorted((box[0], box[2]))
    y1, y2 = sorted((box[1], box[3]))
    w, h = max(x2 - x1 + 1, 1.0), max(y2 - y1 + 1, 1.0)
    dx, dy = point[0] - (x1 + x2) / 2, point[1] - (y1 + y2) / 2
    return {"reward": math.exp(-(dx * dx / (2 * w * w) + dy * dy / (2 * h * h))), "acc": 0.0}


@reward(name="gui_episode_reward", runs_in="thread")
def gui_episode_reward(trajectory: Any) -> dict[str, float]:
    """1.0 when the chain's ``gui`` episode reached its goal, else 0; ``steps`` it took as an extra."""
    steps = episode(trajectory, "gui", "gui_episode_reward", "gui_step")["steps"]
    won = any(s["info"].get("won") for s in steps)
    return {"reward": float(won), "steps": float(len(steps))}


@reward(name="ok_vqa_reward", runs_in="thread")
def ok_vqa_reward(prediction: str, answers: Any = None, answer: Any = None) -> dict[str, float]:
    """AgentFly's OK-VQA reward: the best F1 over the human answers.

    Returns:
        ``{"reward": f1, "f1", "em", "vqa_acc"}``; ``vqa_acc`` is ``min(n / 3, 1)`` for the
        ``n`` answers (duplicates counted) the prediction matches exactly after normalisation.
    """
    golds = gold_answers(answer, answers)
    predicted = answer_span(prediction)
    scores = qa_scores(predicted, golds)
    matching = sum(exact_match(predicted, g) for g in golds)
    return {"reward": scores["f1"], "f1": scores["f1"], "em": scores["em"], "vqa_acc": min(matching / 3, 1.0)}


@reward(name="infoseek_reward", runs_in="thread")
def infoseek_reward(
    prediction: str, answer: Any = None, answer_eval: Any = None, trajectory: Chain = None
) -> dict[str, float]:
    """AgentFly's InfoSeek reward: ``0.8 * best F1 + 0.2 * [more than one tool call]``.

    Returns:
        ``{"reward", "f1", "tool_reward"}`` (the second term's indicator).
    """
    evals = [a for a in (list(answer_eval) if answer_eval is not None else []) if isinstance(a, str)]
    scores = qa_scores(answer_span(prediction), gold_answers(answer, evals))
    tool_reward = 1.0 if tool_call_count(trajectory) > 1 else 0.0
    return {"reward": 0.2 * tool_reward + 0.8 * scores["f1"], "f1": scores["f1"], "tool_reward": tool_reward}
