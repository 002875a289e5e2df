"""Trajectories → one padded :class:`~agentfly.core.batch.RolloutBatch` (its docstring gives the layout).

The response mask is the trajectories' loss masks (1 = sampled and trained on); the engine's
log-probabilities are kept where it is 1 (0 elsewhere); a chain's reward sits at its last sampled
token; greedy baseline chains (an estimator that ``needs_baselines``)
give each row the reward of its prompt's greedy chain and are not rows themselves. A chain that
folded its history (:mod:`agentfly.rollout.folding`) gives one row per segment, in its group, each
with the ids its engine calls were given and sampled; the chain's reward is spread over its rows
by :func:`~agentfly.rollout.folding.segment_rewards` (``last_only``: at the last row's last sampled
token, 0 on the earlier rows). The per-turn fields (each token's turn, each turn's own reward, the
anchor state each turn acted on) are :func:`~agentfly.rollout.turn_fields.turn_fields`'. A row's
images (a vision chain's) go to ``RolloutBatch.images`` as the trajectory holds them.
"""

from __future__ import annotations

import torch

from agentfly.core.batch import RolloutBatch
from agentfly.core.trajectory import Trajectory
from agentfly.rollout.folding import segment_rewards
from agentfly.rollout.turn_fields import turn_fields


def collate_trajectories(
    trajs: list[Trajectory],
    pad_id: int,
    baselines: list[Trajectory] | None = None,
    anchor_similarity: float | None = None,
) -> RolloutBatch:
    """Pad ``trajs`` into a batch, a row per segment; with ``baselines`` (greedy chains), set
    ``reward_baselines``; ``anchor_similarity``: group anchor states by text similarity at this
    threshold instead of by equal text (GiGPO's ``enable_similarity``)."""
    if not trajs:
        raise ValueError("cannot collate an empty list of trajectories")
    rewards = [r for t in trajs for r in segment_rewards(t)]
    chains, trajs = trajs, [s for t in trajs for s in t.segments]
    batch = len(trajs)
    p_len = max(len(t.prompt_ids) for t in trajs)
    t_len = max(1, max(len(t.response_ids) for t in trajs))
    input_ids = torch.full((batch, p_len + t_len), pad_id, dtype=torch.long)
    attention = torch.zeros(batch, p_len + t_len, dtype=torch.long)
    response_mask = torch.zeros(batch, t_len)
    scores = torch.zeros(batch, t_len)
    versions = torch.full((batch, t_len), -1, dtype=torch.long)
    rollout_logp = torch.zeros(batch, t_len)
    for i, t in enumerate(trajs):
        p, r = len(t.prompt_ids), len(t.response_ids)
        input_ids[i, p_len - p : p_len] = torch.tensor(t.prompt_ids, dtype=torch.long)
        attention[i, p_len - p : p_len] = 1
        if r:
            input_ids[i, p_len : p_len + r] = torch.tensor(t.response_ids, dtype=torch.long)
            attention[i, p_len : p_len + r] = 1
            response_mask[i, :r] = torch.tensor(t.loss_mask, dtype=torch.float32)
            if len(t.policy_versions) == r:
                versions[i, :r] = torch.tensor(t.policy_versions, dtype=torch.long)
            if len(t.rollout_logprobs) != r:
                raise ValueError(
                    f"chain {t.group_id}/{t.chain_index} has {r} response tokens but "
                    f"{len(t.rollout_logprobs)} rollout log-probabilities"
                )
            # times the mask: a turn masked after sampling (train_on_last_turn) keeps its log-probs
            rollout_logp[i, :r] = torch.tensor(t.rollout_logprobs) * response_mask[i, :r]
        sampled = response_mask[i].nonzero()
        if len(sampled) and rewards[i] is not None:
            scores[i, int(sampled[-1])] = float(rewards[i])
    position_ids = (attention.cumsum(-1) - 1).clamp(min=0)
    turn_index, turn_rewards, turn_anchor = turn_fields(chains, t_len, anchor_similarity)
    return RolloutBatch(
        input_ids=input_ids,
        attention_mask=attention,
        position_ids=position_ids,
        response_mask=response_mask,
        token_level_scores=scores,
        token_level_rewards=scores.clone(),
        index=torch.tensor([t.group_id for t in trajs], dtype=torch.long),
        prompt_length=p_len,
        reward_baselines=None if baselines is None else collate_baselines(trajs, baselines),
        policy_version=versions.masked_fill(response_mask == 0, -1),
        rollout_log_probs=rollout_logp,
        turn_index=turn_index,
        turn_rewards=turn_rewards,
        turn_anchor=turn_anchor,
        images=[tuple(t.images) for t in trajs] if any(t.images for t in trajs) else None,
    )


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
