"""Context folding: a chain that calls ``summarize`` drops its history and goes on in a new
segment; each segment keeps exactly the ids its engine calls were given and sampled, trains as a
row of its own, and the chain's reward goes to its last segment (AgentFly's ``last_only``)."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from agentfly.core.errors import ConfigError
from agentfly.rollout.agent_loop import AgentLoop
from agentfly.rollout.agents import get_agent
from agentfly.rollout.collate import collate_trajectories
from agentfly.rollout.engines.base import GenerationOutput
from agentfly.rollout.folding import decompose_reward, fold_messages
from agentfly.rollout.templates import get_template
from agentfly.rollout.tools import get_tool
from agentfly.run.plan import check_folding
from tests.rollout.scripted_loops import ROWS, assert_segment_is_what_the_engine_sampled, call

SCRIPT = [
    call("calculator", expression="12*34"),
    call("summarize", summary="12*34 is 408"),  # fold 1
    call("calculator", expression="400+8"),
    call("summarize", summary="the answer is 408"),  # fold 2: the first summary is cut
    call("answer", answer="408"),
]
SEGMENT_CALLS = [(0, 1), (2, 3), (4,)]  # the engine calls of each segment


class RecordingEngine:
    """Replays ``SCRIPT`` one call after another, recording what it was given and sampled; call
    ``k`` reports log-probability ``-(k + 1) / 10`` and weights version ``k``."""

    def __init__(self, tokenizer):
        self.tokenizer, self.calls = tokenizer, []

    async def generate(self, prompts, sampling):
        (prompt,) = prompts
        k = len(self.calls)
        ids = self.tokenizer.encode(SCRIPT[k] + "<|im_end|>", add_special_tokens=False)
        self.calls.append((list(prompt), ids))
        return [[GenerationOutput(ids, [-(k + 1) / 10] * len(ids), "stop", weights_version=k)]]


@pytest.fixture(scope="module")
def folded(model_dir):
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast.from_pretrained(str(model_dir))
    engine = RecordingEngine(tok)
    tools = [get_tool(t) for t in ("calculator", "summarize", "answer")]
    loop = AgentLoop(engine=engine, tokenizer=tok, template=get_template("qwen2.5"),
                     agent=get_agent("hermes", tools), reward="math_equal_reward_tool", max_turns=6)
    (traj,) = loop.run(ROWS[:1])
    return loop, engine, traj


def test_the_chain_folds_twice_into_three_segments(folded):
    _, engine, traj = folded
    assert len(engine.calls) == 5 and traj.num_turns == 5
    assert traj.finish_reason == "answer" and traj.reward == 1.0
    assert len(traj.segments) == 3 and traj.segments[-1] is traj
    assert [s.group_id for s in traj.segments] == [0, 0, 0]
    assert [sorted(set(s.turn_ids)) for s in traj.segments] == [[0, 1], [2, 3], [4]]  # the chain's turns


def test_each_segment_is_what_its_engine_calls_were_given_and_sampled(folded):
    _, engine, traj = folded
    for segment, calls in zip(traj.segments, SEGMENT_CALLS, strict=True):
        given = [engine.calls[k][0] for k in calls]
        assert all(g[: len(segment.prompt_ids)] == segment.prompt_ids for g in given)
        assert given[0] == segment.prompt_ids  # the segment's first call sees its prompt alone
        assert_segment_is_what_the_engine_sampled(segment, engine.calls, calls)
    # the observations between the turns of a segment carry mask 0; a fold shows none
    assert 0 in traj.segments[0].loss_mask and 0 in traj.segments[1].loss_mask
    assert all(traj.segments[2].loss_mask)


def test_a_folded_prompt_is_the_question_and_the_latest_summary(folded):
    loop, _, traj = folded
    question = ROWS[0]["question"]
    for segment, summary in zip(traj.segments[1:], ("12*34 is 408", "the answer is 408"), strict=True):
        messages = loop.agent.initial_messages(f"{question} [Previous Summary]: {summary}")
        text = loop.template.prompt(messages, loop.agent.template_tools())
        assert segment.prompt_ids == loop.tokenizer.encode(text, add_special_tokens=False)
        assert segment.messages[: len(messages)] == messages


def test_collate_gives_a_row_per_segment_and_the_reward_to_the_last(folded):
    _, _, traj = folded
    batch = collate_trajectories([traj], pad_id=0)
    assert len(batch) == 3 and batch.index.tolist() == [0, 0, 0]
    p = batch.prompt_length
    for row, segment in enumerate(traj.segments):
        ids = batch.input_ids[row][batch.attention_mask[row].bool()].tolist()
        assert ids == segment.input_ids
        r = len(segment.response_ids)
        assert batch.response_mask[row, :r].tolist() == [float(m) for m in segment.loss_mask]
        assert batch.input_ids[row, p : p + r].tolist() == segment.response_ids
    assert batch.token_level_scores[:2].abs().sum() == 0
    last = int(batch.response_mask[2].nonzero()[-1])
    assert batch.token_level_scores[2, last] == 1.0 and batch.token_level_scores[2].sum() == 1.0


def test_train_on_last_turn_keeps_only_the_last_segments_last_turn(folded):
    import copy

    traj = copy.deepcopy(folded[2])
    traj.mask_all_but_last_turn()
    assert not any(traj.segments[0].loss_mask) and not any(traj.segments[1].loss_mask)
    assert any(traj.loss_mask) and traj.sampled_versions == [4] * sum(traj.loss_mask)


def test_fold_messages_keeps_the_prompt_and_only_the_newest_summary():
    # AgentFly's form: content as a list of parts; the earlier summary is cut, not stacked
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Q? [Previous Summary]: old"}]},
        {"role": "assistant", "content": "<tool_call>...</tool_call>"},
        {"role": "tool", "content": "408"},
    ]
    assert fold_messages(messages, "[Previous Summary]: new") == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Q? [Previous Summary]: new"},
    ]
    assert messages[1]["content"][0]["text"] == "Q? [Previous Summary]: old"  # not changed


def test_reward_decompositions_by_hand():
    assert decompose_reward(1.0, 3) == [0.0, 0.0, 1.0]
    assert decompose_reward(1.0, 3, "broadcast") == [1.0, 1.0, 1.0]
    assert decompose_reward(1.0, 3, "uniform") == pytest.approx([1 / 3] * 3)
    # weights 0.5^2, 0.5^1, 0.5^0 = 1/4, 1/2, 1 over their sum 7/4
    assert decompose_reward(1.0, 3, "geometric", gamma=0.5) == pytest.approx([1 / 7, 2 / 7, 4 / 7])
    assert decompose_reward(2.0, 1, "geometric") == [2.0]


def test_a_folding_tool_needs_one_rank():
    cfg = OmegaConf.create({"agent": {"init_config": {"tools": ["calculator", "summarize"]}}})
    check_folding(cfg, 1)
    with pytest.raises(ConfigError, match=r"\['summarize'\] fold the chain's history.*2 ranks"):
        check_folding(cfg, 2)
    check_folding(OmegaConf.create({"agent": {"init_config": {"tools": ["calculator"]}}}), 2)
