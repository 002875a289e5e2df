"""The agent loop: finish reasons, masks and token exactness, failures that do not stop a run."""

from __future__ import annotations

import logging

import pytest

from agentfly.rollout.agents import get_agent
from agentfly.rollout.data import question_of
from agentfly.rollout.engines import scripted as _scripted  # noqa: F401  (registers "scripted")
from agentfly.rollout.templates import get_template
from agentfly.rollout.tools import get_tool
from agentfly.rollout.unseen_tools import shows_tool_schemas
from tests.rollout.scripted_loops import ROWS, call, make_loop


def check_token_exact(loop, traj):
    """Rendering the recorded chat gives exactly the trajectory's ids, and the mask marks
    exactly the assistant turns' tokens."""
    tok = loop.tokenizer
    assert len(traj.response_ids) == len(traj.loss_mask) == len(traj.rollout_logprobs)
    text = loop.template.render(traj.messages, loop.agent.template_tools())
    # ChatML closes the last assistant turn with "<|im_end|>\n"; the engine sampled the marker
    assert text.endswith(loop.template.end_of_turn + "\n")
    text = text[:-1]
    assert tok.encode(text, add_special_tokens=False) == traj.input_ids
    sampled = [t for t, m in zip(traj.response_ids, traj.loss_mask) if m]
    turns = [
        m["content"] + loop.template.end_of_turn for m in traj.messages if m["role"] == "assistant"
    ]
    assert sampled == tok.encode("".join(turns), add_special_tokens=False)
    assert all(lp == (-1.0 if m else 0.0) for lp, m in zip(traj.rollout_logprobs, traj.loss_mask))


def test_three_turns_with_tools_then_answer(model_dir):
    script = [
        call("calculator", expression="12*34"),
        call("calculator", expression="400+8"),
        call("answer", answer="408"),
    ]
    loop = make_loop(model_dir, script, max_turns=3, num_chains=2)
    trajs = loop.run(ROWS)
    assert len(trajs) == 4
    assert [t.group_id for t in trajs] == [0, 0, 1, 1]
    assert [t.chain_index for t in trajs] == [0, 1, 0, 1]
    first = trajs[0]
    assert first.finish_reason == "answer" and first.num_turns == 3
    assert first.final_response == "408"
    assert [c.observation for c in first.tool_calls[:2]] == ["408", "408"]
    assert first.reward == 1.0  # right answer with a tool call
    assert trajs[2].reward == pytest.approx(0.1)  # 15 expected, answered 408, tool used
    for t in trajs:
        check_token_exact(loop, t)
        # the observations between turns carry mask 0 and sit between sampled runs
        assert 0 in t.loss_mask and t.loss_mask[0] == 1 and t.loss_mask[-1] == 1


def test_no_tool_call_ends_the_chain(model_dir):
    loop = make_loop(model_dir, ["The answer is 408."], max_turns=3)
    (t,) = loop.run(ROWS[:1])
    assert t.finish_reason == "no_tool_call" and t.num_turns == 1
    assert t.final_response == "The answer is 408." and t.reward == 0.0
    assert all(m == 1 for m in t.loss_mask)


def test_max_turns(model_dir):
    loop = make_loop(model_dir, [call("calculator", expression="1+1")], max_turns=2)
    (t,) = loop.run(ROWS[:1])
    assert t.finish_reason == "max_turns" and t.num_turns == 2 and len(t.tool_calls) == 2
    check_token_exact(loop, t)


def test_max_model_len_stops_before_an_overflow(model_dir):
    script = [call("calculator", expression="1+1")]
    probe = make_loop(model_dir, script, max_turns=1)
    (p,) = probe.run(ROWS[:1])
    limit = len(p.input_ids) + 5  # room for the first turn, not for the observation's text between turns
    loop = make_loop(model_dir, script, max_turns=4, max_model_len=limit)
    (t,) = loop.run(ROWS[:1])
    assert t.finish_reason == "max_model_len"
    assert len(t.input_ids) <= limit


def test_train_on_last_turn_masks_earlier_turns(model_dir):
    script = [call("calculator", expression="2*3"), call("answer", answer="6")]
    full = make_loop(model_dir, script, max_turns=3).run(ROWS[:1])[0]
    last = make_loop(model_dir, script, max_turns=3, train_on_last_turn=True).run(ROWS[:1])[0]
    assert full.response_ids == last.response_ids
    last_turn = max(full.turn_ids)
    expected = [m if turn == last_turn else 0 for m, turn in zip(full.loss_mask, full.turn_ids)]
    assert last.loss_mask == expected and sum(last.loss_mask) < sum(full.loss_mask)


@pytest.mark.parametrize(
    "reply, error",
    [
        ("<tool_call>\n{not json}\n</tool_call>", "invalid_arguments"),
        (call("search_the_web", query="x"), "unknown_tool"),
        (call("calculator", expression="__import__('os')"), None),
    ],
)
def test_bad_tool_calls_become_error_observations(model_dir, reply, error):
    loop = make_loop(model_dir, [reply, call("answer", answer="1")], max_turns=3)
    (t,) = loop.run(ROWS[:1])
    assert t.finish_reason == "answer" and t.error is None
    rec = t.tool_calls[0]
    assert not rec.ok
    if error:
        assert rec.error == error
    assert "rror" in rec.observation
    check_token_exact(loop, t)


def test_a_reward_that_crashes_scores_zero(model_dir):
    from agentfly.rollout.rewards import reward

    @reward(name="test_loop_crashing_reward")
    def crashing(prediction):
        raise RuntimeError("boom")

    loop = make_loop(model_dir, [call("answer", answer="408")])
    loop.reward = "test_loop_crashing_reward"
    (t,) = loop.run(ROWS[:1])
    assert t.reward == 0.0 and t.reward_failed


def test_question_field_detection_and_error_naming_the_row():
    assert question_of({"problem": "p"}) == "p"
    assert question_of({"prompt": "q", "answer": 1}) == "q"
    with pytest.raises(ValueError, match="row 3 has no question field"):
        question_of({"answer": "1"}, row_index=3)


def test_concurrency_cap_is_respected(model_dir):
    import asyncio

    loop = make_loop(model_dir, [call("answer", answer="1")], num_chains=4, max_concurrent_chains=2)
    live, peak = 0, 0
    inner = loop._chain

    async def counting(*a, **k):
        nonlocal live, peak
        live += 1
        peak = max(peak, live)
        await asyncio.sleep(0.01)
        try:
            return await inner(*a, **k)
        finally:
            live -= 1

    loop._chain = counting
    trajs = loop.run(ROWS)
    assert len(trajs) == 8 and peak == 2


# ------------------------------------------------------------ a template that hides the schemas


@pytest.mark.parametrize(("template", "agent", "shown"), [
    ("qwen2.5", "hermes", True), ("qwen2.5-no-system-tool", "hermes", False), ("qwen2.5", "react", True),
])
def test_whether_the_model_is_shown_the_tools_schemas(template, agent, shown):
    tools = [get_tool("calculator"), get_tool("answer")]
    assert shows_tool_schemas(get_template(template), get_agent(agent, tools)) is shown


@pytest.mark.parametrize("template", ["qwen2.5-no-system-tool", "qwen2.5"])
def test_calls_that_all_miss_a_hidden_schema_name_the_template(model_dir, caplog, template):
    """Well-formed calls with another tool's arguments fail as ``invalid_arguments`` under both
    templates; where the template showed the model no schema, the run says so, once."""
    loop = make_loop(model_dir, [call("answer", expression="12*34")], template=template, max_turns=1, num_chains=4)
    with caplog.at_level(logging.WARNING, logger="agentfly.rollout.unseen_tools"):
        trajs = loop.run(ROWS[:1]) + loop.run(ROWS[:1])
    assert [c.error for t in trajs for c in t.tool_calls] == ["invalid_arguments"] * 8
    said = [r.getMessage() for r in caplog.records
            if r.name == "agentfly.rollout.unseen_tools" and "arguments it does not take" in r.getMessage()]
    if template == "qwen2.5":
        assert said == []
    else:
        (message,) = said  # the second rollout does not repeat it
        assert "'answer'" in message and "unknown argument(s): expression" in message
        assert "'qwen2.5-no-system-tool' shows the model no tool schemas" in message


def test_calls_that_are_not_json_are_not_blamed_on_the_template(model_dir, caplog):
    """A broken call names no tool's arguments: the template is not why it failed."""
    broken = '<tool_call>\n{"name": "answer", "arguments": {"answer": "4\n</tool_call>'
    loop = make_loop(model_dir, [broken], template="qwen2.5-no-system-tool", max_turns=1, num_chains=4)
    with caplog.at_level(logging.WARNING, logger="agentfly.rollout.unseen_tools"):
        trajs = loop.run(ROWS[:1])
    assert [c.error for t in trajs for c in t.tool_calls] == ["invalid_arguments"] * 4
    assert [r for r in caplog.records if r.name == "agentfly.rollout.unseen_tools"] == []


@pytest.mark.parametrize("template", ["qwen2.5-no-system-tool", "qwen2.5"])
def test_a_tool_no_chain_called_and_the_model_was_never_shown_is_named(model_dir, caplog, template):
    """The model calls a tool it does not have (what its warm start knew) and never the one it
    has: where the template hid the schemas and the system prompt names neither, the run says
    the model cannot know the tool exists, once; a system prompt that names it says nothing."""
    for system_prompt in (None, "Use calculator for arithmetic and answer to reply."):
        caplog.clear()
        loop = make_loop(model_dir, [call("convert", value=1)], template=template, max_turns=1, num_chains=4)
        loop.agent = get_agent("hermes", [get_tool("calculator"), get_tool("answer")], system_prompt)
        with caplog.at_level(logging.WARNING, logger="agentfly.rollout.unseen_tools"):
            trajs = loop.run(ROWS[:1]) + loop.run(ROWS[:1])
        assert [c.error for t in trajs for c in t.tool_calls] == ["unknown_tool"] * 8
        said = [r.getMessage() for r in caplog.records if r.name == "agentfly.rollout.unseen_tools"]
        if template == "qwen2.5" or system_prompt:
            assert said == [], said
        else:
            assert len(said) == 2 and all("they called tools they do not have: convert" in m for m in said)
            assert "tool 'calculator'" in said[0] and "tool 'answer'" in said[1]
            assert "'qwen2.5-no-system-tool' shows the model no tool schemas" in said[0]


def test_the_room_left_is_the_tighter_of_the_context_and_the_response_budget():
    from agentfly.core.trajectory import Trajectory

    traj = Trajectory(prompt_ids=list(range(10)))
    traj.append_sampled([1] * 3, [0.0] * 3)
    traj.append_observation([2] * 2)  # 10 prompt + 5 response tokens
    assert traj.room(40, 20) == (15, "max_response_len")  # 40 - 15 = 25 left in context, 20 - 5 = 15
    assert traj.room(25, 20) == (10, "max_model_len")  # 25 - 15 = 10 < 15
    assert traj.room(30, 20) == (15, "max_model_len")  # a tie: the context's name
    assert traj.room(40, None) == (25, "max_model_len")


def test_a_tool_call_cut_off_at_max_tokens_is_said_to_be_cut_off(model_dir):
    """A turn that reaches max_tokens inside its tool call: the model reads that the call was
    cut off at the limit (not that it is bad JSON), the call counts as ``cut_off``, and the chain
    goes on; a complete call that fits is read as before."""
    from agentfly.rollout.engines.base import SamplingParams
    from agentfly.rollout.summary import summarize

    long_call = call("calculator", expression="+".join(["1"] * 40))
    loop = make_loop(model_dir, [long_call, "36"], max_turns=3)
    cut = len(loop.tokenizer.encode(long_call, add_special_tokens=False)) // 2
    (t,) = loop.run(ROWS[:1], sampling=SamplingParams(max_tokens=cut))
    rec = t.tool_calls[0]
    assert not rec.ok and rec.error == "cut_off"
    assert f"cut off: the turn reached its limit of {cut} tokens" in rec.observation
    assert "JSON" not in rec.observation
    assert summarize([t])["failures/tool_kinds/cut_off"] == 1
    (whole,) = make_loop(model_dir, [long_call, "36"], max_turns=3).run(ROWS[:1], sampling=SamplingParams(max_tokens=4 * cut))
    assert whole.tool_calls[0].ok
