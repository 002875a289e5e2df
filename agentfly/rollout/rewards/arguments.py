"""The keyword arguments a reward is called with.

A reward is called with keyword arguments only::

    fn(prediction=final_response, trajectory=trajectory, **row_fields)

and receives just the keywords it declares (all of them if it takes ``**kwargs``); a function
that names ``final_response`` instead of ``prediction`` (AgentFly's spelling) gets it under that
name too.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from agentfly.rollout.rewards.registry import RewardFn, reward_name_of
from agentfly.rollout.rewards.result import RewardError

if TYPE_CHECKING:
    from agentfly.core.trajectory import Trajectory

_PREDICTION_NAMES = ("prediction", "final_response")
_RESERVED = frozenset((*_PREDICTION_NAMES, "trajectory"))


def bind_reward_kwargs(
    fn: RewardFn, prediction: str, trajectory: Trajectory | None, row: Mapping[str, Any]
) -> dict[str, Any]:
    """The keyword arguments ``fn`` is called with.

    ``prediction`` and ``trajectory`` take precedence over row fields of the same name. A data
    module can call this once on its first row to fail fast on a reward/dataset mismatch.

    Raises:
        RewardError: (kind ``missing_field``) ``fn`` requires an argument the row lacks; the
            message names the field and the reward.
    """
    available: dict[str, Any] = {k: v for k, v in row.items() if k not in _RESERVED}
    available.update(prediction=prediction, final_response=prediction, trajectory=trajectory)
    params = inspect.signature(fn).parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        # ``final_response`` is only a spelling of ``prediction``; don't hand both to **kwargs
        # unless the function names it.
        named = {p.name for p in params}
        return {k: v for k, v in available.items() if k != "final_response" or k in named}
    kwargs: dict[str, Any] = {}
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.POSITIONAL_ONLY):
            if p.kind is p.POSITIONAL_ONLY and p.default is p.empty:
                raise RewardError(
                    "bad_signature",
                    f"reward {reward_name_of(fn)!r} has a positional-only parameter "
                    f"{p.name!r}; rewards are called with keyword arguments only",
                )
            continue
        if p.name in available:
            kwargs[p.name] = available[p.name]
        elif p.default is p.empty:
            raise RewardError(
                "missing_field",
                f"reward {reward_name_of(fn)!r} requires field {p.name!r}, which the data row "
                f"lacks (row fields: {', '.join(sorted(row)) or 'none'})",
            )
    return kwargs
