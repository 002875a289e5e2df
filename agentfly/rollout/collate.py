"""Trajectories → one padded training batch.

Layout (B chains, P = longest prompt, T = longest response):
    input_ids (B, P + T): prompts left-padded to P, responses right-padded to T.
    attention_mask (B, P + T), position_ids (B, P + T): from the mask (cumulative sum - 1).
    responses (B, T): the response ids (padding = pad id).
    response_mask (B, T): the trajectories' loss masks (1 = sampled and trained on).
    rollout_log_probs (B, T): the engine's log-probabilities (0 where the mask is 0).
    token_level_scores (B, T): the chain's reward at its last sampled token, 0 elsewhere.
    index (B,): group id (chains of one prompt share it).
    reward_baselines (B,): with greedy baseline chains (:func:`collate_baselines`), the reward of
        the greedy chain of each row's prompt.
The position that predicts response token ``t`` is ``P - 1 + t``.
"""

from __future__ import annotations

from typing import Any

import torch

from agentfly.rollout.trajectory import Trajectory


def collate_trajectories(trajs: list[Trajectory], pad_id: int) -> dict[str, Any]:
    if not trajs:
        raise ValueError("cannot collate an empty list of trajectories")
    batch = len(trajs)
    p_len = max(len(t.prompt_ids) for t in trajs)
    t_len = max(1, max(len(t.response_ids) for t in trajs))
    input_ids = torch.full((batch, p_len + t_len), pad_id, dtype=torch.long)
    attention = torch.zeros(batch, p_len + t_len, dtype=torch.long)
    response_mask = torch.zeros(batch, t_len)
    rollout_lp = torch.zeros(batch, t_len)
    scores = torch.zeros(batch, t_len)
    for i, t in enumerate(trajs):
        p, r = len(t.prompt_ids), len(t.response_ids)
        input_ids[i, p_len - p : p_len] = torch.tensor(t.prompt_ids, dtype=torch.long)
        attention[i, p_len - p : p_len] = 1
        if r:
            input_ids[i, p_len : p_len + r] = torch.tensor(t.response_ids, dtype=torch.long)
            attention[i, p_len : p_len + r] = 1
            response_mask[i, :r] = torch.tensor(t.loss_mask, dtype=torch.float32)
            rollout_lp[i, :r] = torch.tensor(t.rollout_logprobs, dtype=torch.float32)
        sampled = response_mask[i].nonzero()
        if len(sampled) and t.reward is not None:
            scores[i, int(sampled[-1])] = float(t.reward)
    position_ids = (attention.cumsum(-1) - 1).clamp(min=0)
    return {
        "input_ids": input_ids,
        "attention_mask": attention,
        "position_ids": position_ids,
        "responses": input_ids[:, p_len:],
        "response_mask": response_mask,
        "rollout_log_probs": rollout_lp,
        "token_level_scores": scores,
        "index": torch.tensor([t.group_id for t in trajs], dtype=torch.long),
        "prompt_length": p_len,
    }


def collate_baselines(trajs: list[Trajectory], baselines: list[Trajectory]) -> torch.Tensor:
    """Each chain's baseline: the reward of the greedy chain of its prompt (same group id).

    An unscored greedy chain counts 0, as an unscored chain does in ``collate_trajectories``.

    Returns:
        (B,) float, in the order of ``trajs``.
    """
    by_group = {b.group_id: float(b.reward or 0.0) for b in baselines}
    missing = sorted({t.group_id for t in trajs} - by_group.keys())
    if missing:
        raise ValueError(f"no greedy baseline chain for group(s) {missing}")
    return torch.tensor([by_group[t.group_id] for t in trajs], dtype=torch.float32)
