"""agentfly's rollout records as training examples, token for token.

A record is one chain as :func:`agentfly.rollout.summary.trajectory_record` writes it: a line of
``agentfly rollout``'s output, or of a fit's ``trajectories/val_trajectories_iter*.jsonl``
(``rollouts_rank*.jsonl`` holds rewards only, no tokens). Its ``prompt_ids``,
``response_ids`` and ``loss_mask`` become the example as they are, nothing decoded and re-encoded,
so the tokens trained on are those the engine sampled, under the mask the loop set. The
reward filter (``data.min_reward``) keeps the chains whose ``reward`` is at least the bound:
rejection-sampling fine-tuning on the run's own successes.

Each sampled turn (a run of loss-mask-1 tokens) is decoded only to check that the agent type
reads its tool calls (:func:`~agentfly.sft.conversations.turn_problem`): a chain rolled out with
another agent type or template is refused, not learned.
"""

from __future__ import annotations

from typing import Any

from agentfly.core.trajectory import Trajectory
from agentfly.sft.conversations import BadRow, turn_problem

REQUIRED = ("prompt_ids", "response_ids", "loss_mask")


def passes(reward: Any, min_reward: float | None) -> bool:
    """Whether a chain with ``reward`` is kept by the bound ``min_reward`` (None keeps all; a
    chain without a reward passes no bound)."""
    if min_reward is None:
        return True
    return reward is not None and float(reward) >= min_reward


def _ids(record: dict[str, Any], key: str, vocab_size: int) -> list[int]:
    ids = record[key]
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise BadRow(f"{key} must be a list of token ids")
    bad = next((i for i in ids if not 0 <= i < vocab_size), None)
    if bad is not None:
        raise BadRow(f"{key} holds token id {bad}, outside the tokenizer's {vocab_size} ids: another model's record?")
    return ids


def record_trajectory(record: Any, vocab_size: int) -> Trajectory:
    """The chain of a rollout record, its ids and loss mask as recorded.

    Raises:
        BadRow: a field missing or malformed, token ids outside the vocabulary, a loss mask of
            another length than the response, no token with loss mask 1.
    """
    if not isinstance(record, dict):
        raise BadRow(f"a rollout record is a JSON object, got {type(record).__name__}")
    missing = [k for k in REQUIRED if k not in record]
    if missing:
        raise BadRow(
            f"not a rollout record: no {', '.join(missing)} (data.format=rollouts reads agentfly "
            f"rollout's output or a fit's trajectories/*_trajectories_iter*.jsonl)"
        )
    prompt = _ids(record, "prompt_ids", vocab_size)
    response = _ids(record, "response_ids", vocab_size)
    mask = record["loss_mask"]
    if not isinstance(mask, list) or any(m not in (0, 1) for m in mask) or len(mask) != len(response):
        raise BadRow(f"loss_mask must be {len(response)} zeros and ones, one per response id")
    if not any(mask):
        raise BadRow("no assistant turn: no token has loss mask 1")
    reward = record.get("reward")
    return Trajectory(
        prompt_ids=prompt,
        response_ids=response,
        loss_mask=[int(m) for m in mask],
        rollout_logprobs=[0.0] * len(response),
        num_turns=int(record.get("num_turns") or 0),
        reward=None if reward is None else float(reward),
    )


def sampled_turns(traj: Trajectory) -> list[list[int]]:
    """The ids of each run of loss-mask-1 tokens (each sampled turn), in order."""
    turns: list[list[int]] = []
    previous = 0
    for token, m in zip(traj.response_ids, traj.loss_mask, strict=True):
        if m and not previous:
            turns.append([])
        if m:
            turns[-1].append(token)
        previous = m
    return turns


def check_turns(traj: Trajectory, agent: Any, template: Any, tokenizer: Any) -> None:
    """Refuse a chain whose sampled turns the agent type does not read as it would run them.

    Raises:
        BadRow: naming the turn and the problem.
    """
    for k, ids in enumerate(sampled_turns(traj)):
        content, _ = template.split_turn(tokenizer.decode(ids, skip_special_tokens=False))
        problem = turn_problem(agent, content)
        if problem:
            raise BadRow(f"sampled turn {k}: {problem}")
