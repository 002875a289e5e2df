"""Group-relative outcome advantages: GRPO (Shao et al., 2024, https://arxiv.org/abs/2402.03300),
Dr. GRPO (Liu et al., 2025, https://arxiv.org/abs/2503.20783) and GRPO pass@k.

Every sampled token of a response gets the same advantage, computed from the response's outcome
reward (the sum of its token rewards over sampled tokens) relative to the other responses to the
same prompt. Departures, as in verl:
- A group of one response gets mean 0 and std 1 (its advantage is its reward, not 0).
- ``epsilon`` = 1e-6 is added to the std, and the std is Bessel-corrected.
"""

from __future__ import annotations

import torch

from agentfly.core.reductions import group_stats
from agentfly.estimators.base import AdvantageInput, register_estimator

EPSILON = 1e-6


def outcome_scores(token_level_rewards: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """A response's outcome reward: its rewards summed over sampled tokens. (B, T) -> (B,)."""
    return (token_level_rewards * response_mask).sum(dim=-1)


def grpo_scores(scores: torch.Tensor, gid: torch.Tensor, norm_by_std: bool) -> torch.Tensor:
    """Group-normalised scores (B,) -> (B,); singletons use mean 0, std 1."""
    counts, means, stds = group_stats(scores, gid)
    single = counts == 1
    means = torch.where(single, torch.zeros_like(means), means)
    stds = torch.where(single, torch.ones_like(stds), stds)
    centered = scores - means
    return centered / (stds + EPSILON) if norm_by_std else centered


@register_estimator("grpo", needs_groups=True, uses=("norm_adv_by_std_in_grpo",))
def grpo(x: AdvantageInput) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO: ``(r - mean_group) / (std_group + eps)``, or only centred when not normalising."""
    assert isinstance(x.index, torch.Tensor)
    scores = outcome_scores(x.token_level_rewards, x.response_mask)
    adv = grpo_scores(scores, x.index, x.norm_adv_by_std_in_grpo).unsqueeze(-1) * x.response_mask
    return adv, adv


@register_estimator("dr_grpo", needs_groups=True)
def dr_grpo(x: AdvantageInput) -> tuple[torch.Tensor, torch.Tensor]:
    """Dr. GRPO: GRPO without the std normalisation, whatever ``norm_adv_by_std_in_grpo`` says."""
    assert isinstance(x.index, torch.Tensor)
    scores = outcome_scores(x.token_level_rewards, x.response_mask)
    adv = grpo_scores(scores, x.index, norm_by_std=False).unsqueeze(-1) * x.response_mask
    return adv, adv


@register_estimator("grpo_passk", needs_groups=True, min_chains=2, uses=("norm_adv_by_std_in_grpo",))
def grpo_passk(x: AdvantageInput) -> tuple[torch.Tensor, torch.Tensor]:
    """Pass@k GRPO (Thrampoulidis et al., 2025, https://arxiv.org/abs/2503.19595).

    Only the best response of each group gets a non-zero advantage: ``r_max - r_second``
    (divided by ``std_group + eps`` when normalising); ties for the best give 0. Groups of fewer
    than two responses raise ``ValueError``.
    """
    index = x.index
    assert isinstance(index, torch.Tensor)
    scores = outcome_scores(x.token_level_rewards, x.response_mask)
    counts, _, stds = group_stats(scores, index)
    if bool((counts < 2).any()):
        bad = index[counts < 2][0].item()
        raise ValueError(f"grpo_passk needs at least 2 responses per group; group {bad} has 1")
    num_groups = int(index.max().item()) + 1
    neg_inf = torch.full((num_groups,), float("-inf"), dtype=scores.dtype, device=scores.device)
    best = neg_inf.scatter_reduce(0, index, scores, reduce="amax")  # (G,)
    rows = torch.arange(scores.numel(), device=scores.device)
    is_best = scores == best[index]
    # The first row reaching the group's best is "the" best; the runner-up is the max of the rest.
    big = torch.full((num_groups,), scores.numel(), dtype=torch.long, device=scores.device)
    first_best = big.scatter_reduce(0, index, torch.where(is_best, rows, scores.numel()), "amin")
    chosen = rows == first_best[index]
    rest = torch.where(chosen, torch.full_like(scores, float("-inf")), scores)
    second = neg_inf.scatter_reduce(0, index, rest, reduce="amax")  # (G,)
    adv = best[index] - second[index]
    if x.norm_adv_by_std_in_grpo:
        adv = adv / (stds + EPSILON)
    adv = torch.where(chosen, adv, torch.zeros_like(adv)).unsqueeze(-1) * x.response_mask
    return adv, adv
