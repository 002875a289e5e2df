"""The advantage-estimator registry and the one call signature every estimator shares.

Every estimator is a pure function with the keyword-only signature of :func:`estimator_signature`
and returns ``(advantages, returns)``, both (B, T) and zero wherever ``response_mask`` is zero. It
is registered with what it needs (a critic's ``values``, group ``index``, greedy
``reward_baselines``, at least ``min_chains`` chains per prompt), so callers ask the registry
entry instead of branching on names: config validation refuses a setting the estimator cannot
work with, the module loads a critic when ``needs_critic``, and the rollout adds one greedy chain
per prompt, scored but not trained on, when ``needs_baselines``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from agentfly.ops import group_ids
from agentfly.registry import Registry

EstimatorFn = Callable[..., tuple[torch.Tensor, torch.Tensor]]


def estimator_signature(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: torch.Tensor | None = None,
    values: torch.Tensor | None = None,
    reward_baselines: torch.Tensor | None = None,
    gamma: float = 1.0,
    lam: float = 1.0,
    norm_adv_by_std_in_grpo: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The signature shared by every estimator (documentation only).

    Args:
        token_level_rewards: reward per token, usually the outcome reward at the last sampled
            token (minus a KL penalty where one is in the reward). Shape: (B, T).
        response_mask: 1 on tokens the model sampled, 0 on observations and padding. Shape: (B, T).
        index: group id per row, contiguous ``0..G-1`` (the registry entry converts labels).
            Shape: (B,).
        values: critic values per token. Shape: (B, T).
        reward_baselines: reward of a greedy rollout per row (ReMax). Shape: (B,).
        gamma: discount per sampled token.
        lam: GAE lambda.
        norm_adv_by_std_in_grpo: divide group-relative advantages by the group's std.

    Returns:
        ``(advantages, returns)``, both (B, T), zero where ``response_mask`` is zero.
    """
    raise NotImplementedError


@dataclass(frozen=True)
class AdvantageEstimator:
    """A registered estimator, what it needs from the batch, and which of the scalar settings it
    reads.

    Attributes:
        needs_critic: reads critic ``values`` (the module trains a critic).
        needs_groups: compares the chains of a prompt (reads ``index``).
        needs_baselines: reads ``reward_baselines``, the reward of one greedy chain per prompt
            (the rollout produces it).
        min_chains: chains per prompt below which the estimator is undefined (refused when the
            config is composed).
        uses: the scalar settings it reads, among ``gamma``, ``lam`` and
            ``norm_adv_by_std_in_grpo``; one it does not read is named as having no effect when
            a user sets it (:mod:`agentfly.config.inactive`).
    """

    name: str
    fn: EstimatorFn
    needs_critic: bool = False
    needs_groups: bool = False
    needs_baselines: bool = False
    min_chains: int = 1
    uses: tuple[str, ...] = ()

    def __call__(
        self,
        *,
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: Sequence[Any] | torch.Tensor | None = None,
        values: torch.Tensor | None = None,
        reward_baselines: torch.Tensor | None = None,
        gamma: float = 1.0,
        lam: float = 1.0,
        norm_adv_by_std_in_grpo: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if token_level_rewards.shape != response_mask.shape or token_level_rewards.dim() != 2:
            raise ValueError(
                f"token_level_rewards {tuple(token_level_rewards.shape)} and response_mask "
                f"{tuple(response_mask.shape)} must both be (B, T)"
            )
        batch = token_level_rewards.shape[0]
        if self.needs_critic and values is None:
            raise ValueError(f"estimator {self.name!r} needs critic `values` (B, T)")
        if values is not None and values.shape != token_level_rewards.shape:
            raise ValueError(f"values {tuple(values.shape)} must match rewards (B, T)")
        if self.needs_baselines and reward_baselines is None:
            raise ValueError(f"estimator {self.name!r} needs `reward_baselines` (B,)")
        if reward_baselines is not None and reward_baselines.shape != (batch,):
            raise ValueError(
                f"reward_baselines {tuple(reward_baselines.shape)} must be ({batch},), one per row"
            )
        gid = None
        if index is not None:
            gid = group_ids(index, device=token_level_rewards.device)
            if gid.numel() != batch:
                raise ValueError(f"index has {gid.numel()} entries for a batch of {batch}")
        elif self.needs_groups:
            raise ValueError(f"estimator {self.name!r} needs a group `index` (B,)")
        mask = response_mask.to(token_level_rewards.dtype)
        with torch.no_grad():
            return self.fn(
                token_level_rewards=token_level_rewards,
                response_mask=mask,
                index=gid,
                values=values,
                reward_baselines=reward_baselines,
                gamma=gamma,
                lam=lam,
                norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo,
            )


def _as_estimator(obj: Any, spec: str) -> AdvantageEstimator:
    """A ``module:attr`` estimator: an ``AdvantageEstimator``, a function registered with
    :func:`register_estimator`, or a plain function with the shared signature (its
    ``needs_critic`` / ``needs_groups`` / ``needs_baselines`` attributes, False if absent)."""
    if isinstance(obj, AdvantageEstimator):
        return obj
    if not callable(obj) or isinstance(obj, type):
        raise TypeError(f"expected a function with the estimator signature, got {obj!r}")
    registered = (ESTIMATORS.get(name) for name in ESTIMATORS)
    known = next((e for e in registered if e.fn is obj), None)
    if known is not None:
        return known
    flags = {
        k: bool(getattr(obj, k, False)) for k in ("needs_critic", "needs_groups", "needs_baselines")
    }
    return AdvantageEstimator(spec, obj, **flags)


ESTIMATORS: Registry[AdvantageEstimator] = Registry("advantage estimator", coerce=_as_estimator)


def register_estimator(
    name: str,
    *,
    needs_critic: bool = False,
    needs_groups: bool = False,
    needs_baselines: bool = False,
    min_chains: int = 1,
    uses: tuple[str, ...] = (),
    aliases: tuple[str, ...] = (),
) -> Callable[[EstimatorFn], EstimatorFn]:
    """Register a function with the shared signature as an advantage estimator.

    The keyword flags declare what it needs and which scalar settings it reads (see
    :class:`AdvantageEstimator`).
    """
    unknown = set(uses) - {"gamma", "lam", "norm_adv_by_std_in_grpo"}
    if unknown:
        raise ValueError(f"estimator {name!r}: unknown setting(s) in uses: {sorted(unknown)}")

    def decorator(fn: EstimatorFn) -> EstimatorFn:
        ESTIMATORS.register(
            name,
            AdvantageEstimator(
                name, fn, needs_critic, needs_groups, needs_baselines, min_chains, tuple(uses)
            ),
            aliases=aliases,
        )
        return fn

    return decorator


def get_estimator(name: str) -> AdvantageEstimator:
    """The registered estimator called ``name``; an unknown name lists the known ones."""
    return ESTIMATORS.get(name)
