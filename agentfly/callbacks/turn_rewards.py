"""Each turn's own reward in the token rewards (``algorithm.use_turn_rewards``)."""

from __future__ import annotations

from typing import Any, Literal

import torch

from agentfly.callbacks.batch_hooks import RolloutBatchCallback, to_float
from agentfly.core.batch import RolloutBatch
from agentfly.estimators.turns import turn_end_rewards

TurnRewardMode = Literal["decompose", "add"]


def last_sampled(response_mask: torch.Tensor) -> torch.Tensor:
    """Each row's last sampled position as a one-hot (0 everywhere for a row with none sampled),
    where collate puts the outcome reward. Shape: (B, T) in and out."""
    sampled = response_mask > 0  # (B, T)
    positions = torch.arange(sampled.shape[1], device=sampled.device).expand_as(sampled)
    last = torch.where(sampled, positions, -1).amax(-1, keepdim=True)  # (B, 1)
    return (positions == last) & sampled


class TurnRewardCallback(RolloutBatchCallback):
    """Puts ``turn_rewards`` into ``token_level_rewards``, each at its turn's last sampled token
    (:func:`agentfly.estimators.turns.turn_end_positions`).

    A turn's reward is what its tool calls returned (``ToolResult.reward``: an environment's step
    reward), or, when the reward function returns ``turn_rewards``, the reward function's for it:
    the reward function reads the whole episode and has the last word, so an environment's step
    rewards are never counted beside a reward function's decomposition of them.

    ``mode`` says how they meet the outcome reward (the chain's score, at its last sampled token):

    - ``decompose`` (the default): the turn rewards say *where* the reward was earned, not how
      much: each is placed at its turn and the outcome token keeps the rest (the score minus the
      row's turn rewards), so a row's token rewards add up to its score, as without turn
      rewards. A reward function whose ``turn_rewards`` add up to its reward
      (``textworld_progress_reward``) leaves nothing at the outcome token.
    - ``add``: placed beside the outcome, whose score stays whole: the row's return is its score
      plus its turn rewards (shaping bonuses that are not part of the outcome).

    Estimators that discount per sampled token (``gae``, ``reinforce_plus_plus``) then discount
    them by ``algorithm.gamma`` from where they were earned, GiGPO per turn; the group estimators
    (``grpo``...) sum a row's token rewards into its return. It runs after the KL shaping
    (stage 1 > 0), which rewrites the token rewards from the scores.
    """

    stage = 1

    def __init__(self, mode: TurnRewardMode = "decompose") -> None:
        if mode not in ("decompose", "add"):
            raise ValueError(f"TurnRewardCallback: mode={mode!r}; one of 'decompose', 'add'")
        self.mode = mode

    def on_rollout_batch(
        self, trainer: Any, pl_module: Any, batch: RolloutBatch
    ) -> dict[str, float]:
        if batch.turn_rewards is None or batch.turn_index is None:
            raise ValueError("algorithm.use_turn_rewards: the batch has no turn_rewards")
        rewards = batch.token_level_rewards
        placed = turn_end_rewards(
            batch.turn_rewards.to(rewards), batch.turn_index.to(rewards.device), batch.response_mask
        )  # (B, T)
        earned = placed.sum(-1)  # (B,) the turn rewards each row holds
        if self.mode == "decompose":  # the outcome token keeps what the turns did not earn
            placed = placed - earned[:, None] * last_sampled(batch.response_mask)
        batch.token_level_rewards = rewards + placed
        return {"training/turn_reward/mean": to_float(earned.mean())}
