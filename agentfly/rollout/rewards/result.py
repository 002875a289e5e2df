"""What a reward call gives: a :class:`RewardResult`, and the check of a reward's return value.

A reward returns a float, or a dict with key ``reward`` plus extra numeric metrics to log and,
optionally, ``turn_rewards``: a list of numbers, one per assistant turn of the chain, each turn's
own reward (it replaces ``Trajectory.turn_rewards``, its tools' rewards; they enter the token
rewards with ``algorithm.use_turn_rewards``, :class:`agentfly.callbacks.TurnRewardCallback`).
Anything else (NaN, a magnitude beyond float32's range, a string, a dict without ``reward``) is
malformed: a :class:`RewardError` of kind ``malformed``, which the safe call
(:mod:`agentfly.rollout.rewards.call`) turns into a failed result.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

FLOAT32_MAX = 3.4028234663852886e38
"""The largest finite float32: a reward or extra beyond it would overflow the training batch."""


@dataclass
class RewardResult:
    """The outcome of one safe reward call.

    Attributes:
        reward: the scalar reward; 0.0 when the call failed.
        extras: extra numeric metrics the reward returned (``acc``, ``f1``...), as floats.
        turn_rewards: the per-turn rewards it returned, one per assistant turn ([]: none).
        failed: the reward raised, timed out, returned something malformed, or lacked a field.
        error: what went wrong, prefixed by its kind (``timeout: ...``); None when not failed.
        kind: the kind of failure alone (``timeout``, ``queue_timeout``, ``exception``,
            ``malformed``, ``worker_died``, ``output_too_large``, ``missing_field``,
            ``bad_signature``, or a kind the reward raised in a :class:`RewardError`, such as
            an LLM judge's ``judge_timeout``).
    """

    reward: float
    extras: dict[str, float] = field(default_factory=dict)
    turn_rewards: list[float] = field(default_factory=list)
    failed: bool = False
    error: str | None = None
    kind: str | None = None

    def metrics(self) -> dict[str, float]:
        """``{"reward": ..., **extras}``, ready to log."""
        return {"reward": self.reward, **self.extras}


class RewardError(Exception):
    """A reward call went wrong.

    ``kind`` is one of ``missing_field``, ``bad_signature``, ``exception``, ``timeout``,
    ``queue_timeout``, ``malformed``, ``worker_died``, ``output_too_large``, or a kind a reward
    raises itself (the LLM judges': :mod:`agentfly.rollout.rewards.llm_judge`).
    """

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def normalize_reward_output(value: Any) -> tuple[float, dict[str, float]]:
    """Turn a reward's return value into ``(reward, extras)``.

    Non-numeric or non-finite extras are dropped (they cannot be averaged into a metric).

    Raises:
        RewardError: (kind ``malformed``) not a finite number nor a dict with a finite ``reward``,
            or a reward or extra whose magnitude exceeds float32's largest finite value.
    """
    if isinstance(value, Mapping):
        if "reward" not in value:
            raise RewardError(
                "malformed", f"returned a dict without 'reward' (keys: {sorted(map(str, value))})"
            )
        extras = {}
        for key, extra in value.items():
            if key == "reward":
                continue
            number = _as_float(extra)
            if number is not None and math.isfinite(number):
                extras[str(key)] = _within_float32(number, f"extra {str(key)!r}")
        return _finite(value["reward"]), extras
    return _finite(value), {}


def reward_turn_rewards(value: Any, turns: int | None = None) -> list[float]:
    """A reward's per-turn rewards: a dict's ``turn_rewards`` ([] when it has none).

    Args:
        value: what the reward returned.
        turns: the chain's assistant turns (None: not checked).

    Raises:
        RewardError: (kind ``malformed``) not a list of finite numbers, or not one per turn.
    """
    if not isinstance(value, Mapping) or value.get("turn_rewards") is None:
        return []
    raw = value["turn_rewards"]
    raw = raw.tolist() if hasattr(raw, "tolist") else raw  # numpy arrays, tensors
    if isinstance(raw, str | bytes | Mapping) or not isinstance(raw, Sequence):
        raise RewardError("malformed", f"returned turn_rewards {raw!r:.80}, not a list of numbers")
    rewards = [_finite(r) for r in raw]
    if turns is not None and len(rewards) != turns:
        raise RewardError(
            "malformed", f"returned {len(rewards)} turn_rewards for a chain of {turns} turns"
        )
    return rewards


def _as_float(value: Any) -> float | None:
    if value is None or isinstance(value, str | bytes):
        return None
    try:
        return float(value)  # int, bool, numpy and 0-d torch scalars
    except (TypeError, ValueError):
        return None


def _finite(value: Any) -> float:
    number = _as_float(value)
    if number is None:
        raise RewardError(
            "malformed", f"returned {type(value).__name__} {value!r:.80}, not a number"
        )
    if not math.isfinite(number):
        raise RewardError("malformed", f"returned a non-finite reward {number}")
    return _within_float32(number, "reward")


def _within_float32(number: float, what: str) -> float:
    if abs(number) > FLOAT32_MAX:
        raise RewardError(
            "malformed",
            f"returned {what} {number!r}, beyond float32's range (|x| <= {FLOAT32_MAX:.4g})",
        )
    return number
