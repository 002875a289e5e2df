"""Turn rewards (``algorithm.use_turn_rewards``): each turn's own reward enters the token rewards
at the turn's last sampled token, so per-token discounting reaches it from where it was earned.

The hand-derived chain: three turns, their tokens and the observations between them

    position   0   1   2    3   4    5   6
    turn       0   0   1    1   2    2   2
    sampled    1   1   0    1   0    1   1        (2 and 4 are observations, read by the next turn)

with turn rewards r = (1, 2, 3) and the outcome reward 10. The token rewards become 1 at position
1 (turn 0's last sampled token), 2 at 3, and 3 + 10 = 13 at 6. With gamma = 0.9 per sampled token
(observations skipped), the return-to-go G (REINFORCE++'s returns; GAE's with lam = 1 and zero
values, whose advantages before whitening are the same):

    G6 = 13
    G5 = 0.9 * 13                 = 11.7
    G3 = 2 + 0.9 * 11.7           = 12.53
    G1 = 1 + 0.9 * 12.53          = 12.277
    G0 = 0.9 * 12.277             = 11.0493
"""

from __future__ import annotations

import asyncio

import pytest
import torch

from agentfly.callbacks import TurnRewardCallback
from agentfly.core.trajectory import Trajectory
from agentfly.estimators import get_estimator
from agentfly.estimators.gae import gae_advantages
from agentfly.estimators.turns import turn_end_positions, turn_end_rewards
from agentfly.rollout.collate import collate_trajectories
from agentfly.rollout.rewards.call import acompute_reward, ascore_trajectory

TURNS = torch.tensor([[0, 0, 1, 1, 2, 2, 2]])
MASK = torch.tensor([[1, 1, 0, 1, 0, 1, 1.0]])
G = [11.0493, 12.277, 0.0, 12.53, 0.0, 11.7, 13.0]


def test_discounted_returns_of_turn_rewards_by_hand():
    rewards = turn_end_rewards(torch.tensor([[1.0, 2.0, 3.0]]), TURNS, MASK)
    assert rewards.tolist() == [[0.0, 1.0, 0.0, 2.0, 0.0, 0.0, 3.0]]
    rewards[0, 6] += 10.0  # the outcome reward, where collate puts it
    _, returns = get_estimator("reinforce_plus_plus")(
        token_level_rewards=rewards, response_mask=MASK, gamma=0.9
    )
    assert returns[0].tolist() == pytest.approx(G, abs=1e-4)
    advantages, gae_returns = gae_advantages(rewards, torch.zeros_like(rewards), MASK, 0.9, 1.0)
    assert advantages[0].tolist() == pytest.approx(G, abs=1e-4)
    assert gae_returns[0].tolist() == pytest.approx(G, abs=1e-4)


def test_a_turn_without_sampled_tokens_gives_its_reward_to_the_next_one():
    # train_on_last_turn masked turns 0 and 1: their rewards go to turn 2's first sampled token;
    # a row with nothing sampled places nothing
    mask = torch.tensor([[0, 0, 0, 0, 0, 1, 1.0], [0.0] * 7])
    turns = TURNS.expand(2, -1)
    assert turn_end_positions(turns, mask, 3).tolist() == [[5, 5, 6], [-1, -1, -1]]
    rewards = turn_end_rewards(torch.tensor([[1.0, 2.0, 3.0], [1.0, 1.0, 1.0]]), turns, mask)
    assert rewards.tolist() == [[0, 0, 0, 0, 0, 3.0, 3.0], [0.0] * 7]


def three_turns(outcome: float, turn_rewards: list[float]) -> Trajectory:
    traj = Trajectory(prompt_ids=[1, 2], reward=outcome)
    for turn in range(3):
        if turn:
            traj.append_observation([9])
        traj.append_sampled([5, 6] if turn != 1 else [5], [-0.1] * (1 if turn == 1 else 2))
        traj.num_turns += 1
    traj.turn_rewards = list(turn_rewards)
    return traj


def test_collated_turn_rewards_enter_the_token_rewards_through_the_callback():
    batch = collate_trajectories([three_turns(10.0, [1.0, 2.0, 3.0])], pad_id=0)
    assert batch.turn_index.tolist() == TURNS.tolist() and batch.response_mask.tolist() == MASK.tolist()
    assert batch.turn_rewards.tolist() == [[1.0, 2.0, 3.0]]
    assert batch.token_level_rewards.tolist() == [[0, 0, 0, 0, 0, 0, 10.0]]  # the outcome alone
    metrics = TurnRewardCallback(mode="add").on_rollout_batch(None, None, batch)
    assert batch.token_level_rewards.tolist() == [[0, 1.0, 0, 2.0, 0, 0, 13.0]]  # beside the outcome
    assert batch.token_level_scores.tolist() == [[0, 0, 0, 0, 0, 0, 10.0]]  # the reward, unshaped
    assert metrics == {"training/turn_reward/mean": 6.0}


def test_decomposed_turn_rewards_move_the_reward_earlier_and_keep_its_sum():
    # the default: turns earn 1 and 2 where they were taken, the last turn 3, and the outcome
    # token keeps the rest of the reward, 10 - (1 + 2 + 3) = 4, so it gets 3 + 4 = 7: the row
    # adds up to 10, its reward, counted once
    batch = collate_trajectories([three_turns(10.0, [1.0, 2.0, 3.0])], pad_id=0)
    metrics = TurnRewardCallback().on_rollout_batch(None, None, batch)
    assert batch.token_level_rewards.tolist() == [[0, 1.0, 0, 2.0, 0, 0, 7.0]]
    assert metrics == {"training/turn_reward/mean": 6.0}
    # on top of a KL-shaped row (stage 1 runs after it) the shaping stays, token for token
    batch = collate_trajectories([three_turns(10.0, [1.0, 2.0, 3.0])], pad_id=0)
    batch.token_level_rewards = batch.token_level_rewards - 0.5 * MASK
    TurnRewardCallback().on_rollout_batch(None, None, batch)
    assert batch.token_level_rewards.tolist() == [[-0.5, 0.5, 0, 1.5, 0, -0.5, 6.5]]
    # a row with nothing sampled holds nothing; a turn whose tokens are all masked gives its
    # reward to the next sampled token, and the outcome token still keeps only the rest
    batch = collate_trajectories([three_turns(10.0, [1.0, 2.0, 3.0])], pad_id=0)
    batch.response_mask = torch.tensor([[0, 0, 0, 0, 0, 1, 1.0]])
    TurnRewardCallback().on_rollout_batch(None, None, batch)
    assert batch.token_level_rewards.tolist() == [[0, 0, 0, 0, 0, 3.0, 7.0]]
    with pytest.raises(ValueError, match="'decompose', 'add'"):
        TurnRewardCallback(mode="sum")


def test_a_folded_chain_keeps_each_turn_reward_in_the_row_that_holds_the_turn():
    traj = three_turns(10.0, [1.0, 2.0, 3.0])
    traj.fold([1, 2], [])  # turns 0-2 stay in the first row; a fourth turn in the second
    traj.append_sampled([7], [-0.1])
    traj.num_turns += 1
    traj.turn_rewards.append(4.0)
    batch = collate_trajectories([traj], pad_id=0)
    assert batch.turn_rewards.tolist() == [[1.0, 2.0, 3.0, 0.0], [0.0, 0.0, 0.0, 4.0]]
    assert batch.turn_anchor.tolist() == [[0, 1, 2, -1], [-1, -1, -1, 3]]  # none recorded: own ids


async def per_turn_reward(prediction: str, trajectory) -> dict:
    return {"reward": 1.0, "acc": 1.0, "turn_rewards": [0.5, 0.0, 0.25]}


async def two_turn_rewards(prediction: str, trajectory) -> dict:
    return {"reward": 1.0, "turn_rewards": [0.5, 0.0]}


def test_a_reward_function_gives_each_turn_its_reward():
    traj = three_turns(0.0, [1.0, 0.0, 0.0])  # the tools' rewards so far
    result = asyncio.run(ascore_trajectory(per_turn_reward, traj))
    assert not result.failed and result.extras == {"acc": 1.0}
    assert traj.turn_rewards == [0.5, 0.0, 0.25] and traj.reward == 1.0  # the reward's word replaces the tools'
    # one reward per turn, or the call is malformed (a failed chain, not a guess)
    bad = asyncio.run(acompute_reward(two_turn_rewards, "", three_turns(0.0, [0.0] * 3)))
    assert bad.failed and bad.kind == "malformed" and "2 turn_rewards for a chain of 3 turns" in bad.error
