"""Rollout records as SFT examples: token for token into the batch, the loss mask as recorded, and
the reward filter keeping exactly the chains at or above its bound."""

from __future__ import annotations

import json

import pytest

from agentfly.core.trajectory import Trajectory
from agentfly.rollout.collate import collate_trajectories
from agentfly.rollout.data import DataError
from agentfly.rollout.summary import trajectory_record
from agentfly.sft.conversations import ConversationRenderer
from agentfly.sft.datamodule import SFTDataModule
from agentfly.sft.examples import ExampleMaker, load_sft_data
from tests.rollout.scripted_loops import call, make_loop
from tests.sft.conversations import CharTokenizer, hand_renderer


def write_records(path, trajs, tokenizer=None):
    """The lines ``agentfly rollout`` writes (:func:`agentfly.rollout.runner.run_rollout`)."""
    path.write_text("".join(json.dumps(trajectory_record(t, tokenizer)) + "\n" for t in trajs))
    return path


def test_rollout_records_round_trip_token_for_token_into_the_batch(tiny_model_dir, tmp_path):
    """Chains of the real agent loop (scripted turns; one masked to its last turn, as
    ``agent.train_on_last_turn`` records it), written as rollout records, read back as SFT
    examples and drawn by the data module: the batch is the chains' own ids and masks."""
    loop = make_loop(tiny_model_dir, [call("calculator", expression="12*34"), call("answer", answer="408")])
    chains = loop.run([{"question": "What is 12*34?", "answer": "408"}, {"question": "What is 7+8?", "answer": "15"}])
    chains[1].mask_all_but_last_turn()
    assert chains[1].loss_mask != chains[0].loss_mask  # the record's mask, not one recomputed
    path = write_records(tmp_path / "rollouts.jsonl", chains, loop.tokenizer)
    renderer = ConversationRenderer(loop.agent, loop.template, loop.tokenizer)
    data = load_sft_data([str(path)], [], ExampleMaker(renderer, format="rollouts"), bad_rows="error")
    assert [(t.prompt_ids, t.response_ids, t.loss_mask) for t in data.train.kept] == [
        (c.prompt_ids, c.response_ids, c.loss_mask) for c in chains
    ]
    module = SFTDataModule(data.train.kept, [], loop.tokenizer, train_batch_size=2, shuffle=False)
    batch = next(iter(module.train_dataloader()))
    expected = collate_trajectories(chains, module.pad_id)
    assert batch.input_ids.equal(expected.input_ids)
    assert batch.response_mask.equal(expected.response_mask)
    for row, chain in enumerate(chains):  # and by hand: the response right of the prompt
        p = batch.prompt_length
        r = len(chain.response_ids)
        assert batch.input_ids[row, p : p + r].tolist() == chain.response_ids
        assert batch.response_mask[row, :r].tolist() == chain.loss_mask
        assert batch.input_ids[row, p - len(chain.prompt_ids) : p].tolist() == chain.prompt_ids


def chain(reward):
    """A one-turn chain ``A:5|`` after ``U:q\\nA:`` (a hand-template answer, no tool call)."""
    t = Trajectory(prompt_ids=[ord(c) for c in "U:q\nA:"], reward=reward)
    t.append_sampled([ord(c) for c in "5|"], [0.0, 0.0])
    return t


REWARDS = [1.0, 0.5, 0.4999, None, 0.0, 0.75, -1.0]


@pytest.mark.parametrize("bound, kept", [
    (0.5, [1.0, 0.5, 0.75]),
    (0.0, [1.0, 0.5, 0.4999, 0.0, 0.75]),
    (None, REWARDS),
])
def test_the_reward_filter_keeps_exactly_the_chains_at_or_above_its_bound(tmp_path, bound, kept):
    path = write_records(tmp_path / "r.jsonl", [chain(r) for r in REWARDS])
    make = ExampleMaker(hand_renderer(), format="rollouts", min_reward=bound)
    data = load_sft_data([str(path)], [], make, bad_rows="error")
    assert [t.reward for t in data.train.kept] == kept
    assert data.train.filtered == len(REWARDS) - len(kept)
    assert data.counts["data/train_below_min_reward"] == len(REWARDS) - len(kept)


def test_a_bound_no_chain_reaches_says_so(tmp_path):
    path = write_records(tmp_path / "r.jsonl", [chain(0.0), chain(None)])
    make = ExampleMaker(hand_renderer(), format="rollouts", min_reward=0.5)
    with pytest.raises(DataError, match=r"2 record\(s\) below data.min_reward=0.5"):
        load_sft_data([str(path)], [], make, bad_rows="error")


def test_bad_records_are_named_by_file_and_line(tmp_path):
    no_turn = Trajectory(prompt_ids=[85])
    no_turn.append_observation([10])
    bad_call = Trajectory(prompt_ids=[85])
    bad_call.append_sampled([ord(c) for c in "<tool_call>{x}</tool_call>|"], [0.0] * 27)
    lines = [json.dumps(trajectory_record(t)) for t in (chain(1.0), no_turn, bad_call)]
    lines.append(json.dumps({"iteration": 1, "rewards": [1.0]}))  # a fit's rollouts_rank0.jsonl line
    too_big = trajectory_record(chain(1.0))
    too_big["prompt_ids"] = [len(CharTokenizer()) + 5]
    lines.append(json.dumps(too_big))
    path = tmp_path / "r.jsonl"
    path.write_text("\n".join(lines) + "\n")
    data = load_sft_data([str(path)], [], ExampleMaker(hand_renderer(), format="rollouts"), bad_rows="skip")
    assert len(data.train.kept) == 1
    expected = [
        (2, "no assistant turn: no token has loss mask 1"),
        (3, "sampled turn 0: a tool call does not parse under agent type 'hermes'"),
        (4, "not a rollout record: no prompt_ids, response_ids, loss_mask"),
        (5, "outside the tokenizer's"),
    ]
    for (line, why), said in zip(expected, data.bad, strict=True):
        assert said.startswith(f"{path}:{line}: ") and why in said, said
