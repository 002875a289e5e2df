"""Context folding (AgentFly's ``summarize``): a chain drops its history and goes on from a summary.

When a turn's call of a folding tool (``Tool.folds_context``: ``summarize``) succeeds and the
chain has turns left, the agent loop folds it, as AgentFly's ``apply_context_folding`` and
``fold_messages_with_summarize`` (``tools/src/context/tools.py``) do: the messages before the
first assistant turn (system prompt, user question) are kept, any ``[Previous Summary]: ...``
earlier folds appended to the user message is cut from it, and the tool's observation
(``[Previous Summary]: <summary>``) is appended to it after a space. The next turn's prompt is
that history rendered by the template and tokenized: a new segment
(:meth:`agentfly.core.trajectory.Trajectory.fold`), each segment trained on the ids the engine
was given and sampled in it, never re-tokenized. Turns count across segments (``max_turns``
bounds the chain); the context budget restarts with each segment.

Each segment is a training row of its own (:func:`agentfly.rollout.collate.collate_trajectories`)
in its chain's group; the chain's reward is spread over its segments as AgentFly's
``decompose_trajectory_reward`` does, by default ``last_only`` (the last segment gets the
reward, the earlier ones 0).

Departures from AgentFly: only a call that succeeded folds (AgentFly folds on any string
observation, an error message included); the fold comes after the turn's calls, and the other
calls' observations of that turn are not shown (AgentFly appends the observations of calls after
``summarize`` in the same turn to the folded history); a turn that is the chain's last does not
fold (nothing would be generated from the folded prompt).
"""

from __future__ import annotations

import copy
import re
from typing import Any

PREVIOUS_SUMMARY = re.compile(r"\s*\[Previous Summary\]:.*", re.DOTALL)
REWARD_DECOMPOSITIONS = ("last_only", "broadcast", "uniform", "geometric")


def _text(content: Any) -> str:
    """A message's text: a string, or the first text part of a list of parts (AgentFly's form)."""
    if isinstance(content, list):
        return next((p.get("text", "") for p in content if isinstance(p, dict)), "")
    return str(content)


def fold_messages(messages: list[dict[str, Any]], summary: str) -> list[dict[str, Any]]:
    """The history a fold leaves: the messages before the first assistant turn, the last one's
    earlier summary cut and ``summary`` appended to it when it is the user's.

    Args:
        messages: the chain's messages so far (the segment's).
        summary: the folding tool's observation (``[Previous Summary]: ...``).
    """
    first = next((i for i, m in enumerate(messages) if m.get("role") == "assistant"), len(messages))
    prefix = copy.deepcopy(messages[:first])
    if prefix and prefix[-1].get("role") == "user":
        context = PREVIOUS_SUMMARY.sub("", _text(prefix[-1]["content"])).strip()
        prefix[-1]["content"] = f"{context} {summary}"
    return prefix


def fold_chain(traj: Any, summary: str, template: Any, tools: Any, tokenizer: Any) -> None:
    """Fold ``traj`` (a :class:`~agentfly.core.trajectory.Trajectory`): its next segment's
    prompt is :func:`fold_messages` rendered by ``template`` and tokenized once."""
    messages = fold_messages(traj.messages, summary)
    ids = tokenizer.encode(template.prompt(messages, tools), add_special_tokens=False)
    traj.fold(list(ids), messages)


def decompose_reward(
    reward: float, segments: int, mode: str = "last_only", gamma: float = 0.9
) -> list[float]:
    """A chain's reward over its ``segments`` (AgentFly's ``decompose_trajectory_reward``).

    Modes: ``last_only`` ``[0, ..., 0, R]``; ``broadcast`` ``[R, ..., R]``; ``uniform``
    ``[R/n, ..., R/n]``; ``geometric`` ``R * g^(n-1-k) / sum_j g^j`` for segment ``k`` (uniform
    when ``n == 1`` or ``gamma >= 1``).
    """
    if segments < 1:
        raise ValueError(f"segments must be >= 1, got {segments}")
    if mode not in REWARD_DECOMPOSITIONS:
        raise ValueError(f"mode must be one of {', '.join(REWARD_DECOMPOSITIONS)}, got {mode!r}")
    n = segments
    if mode == "last_only":
        return [0.0] * (n - 1) + [reward]
    if mode == "broadcast":
        return [reward] * n
    if mode == "uniform" or n == 1 or gamma >= 1.0:
        return [reward / n] * n
    weights = [gamma ** (n - 1 - k) for k in range(n)]
    return [reward * w / sum(weights) for w in weights]


def segment_rewards(traj: Any, mode: str | None = None) -> list[float | None]:
    """Each segment's reward (None where the chain is unscored); ``mode`` None: the chain's own
    (``Trajectory.segment_reward``)."""
    if traj.reward is None:
        return [None] * len(traj.segments)
    return decompose_reward(float(traj.reward), len(traj.segments), mode or traj.segment_reward)
