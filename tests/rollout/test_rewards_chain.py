"""What rewards read from a chain, in agentfly's Trajectory and in AgentFly's list of messages."""

from __future__ import annotations

from agentfly.core.trajectory import ToolCallRecord, Trajectory
from agentfly.rollout.rewards.chain import (
    answer_argument,
    assistant_texts,
    text_of,
    tool_call_answer,
    tool_call_count,
    used_tool,
)


def _trajectory() -> Trajectory:
    return Trajectory(
        prompt_ids=[1],
        num_turns=2,
        messages=[
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": "<tool_call>search</tool_call>"},
            {"role": "tool", "content": "doc"},
            {"role": "assistant", "content": "<tool_call>answer</tool_call>"},
        ],
        tool_calls=[
            ToolCallRecord("search", {"query": "q"}, "doc", turn=0),
            ToolCallRecord("answer", {"answer": "Paris"}, "Paris", turn=1),
        ],
    )


def test_text_of_content_shapes():
    assert text_of("plain") == "plain"
    assert text_of([{"type": "text", "text": "a"}, {"type": "image"}, "b"]) == "a\nb"
    assert text_of(None) == ""


def test_tool_calls_counted_by_record_or_by_message():
    traj = _trajectory()
    # two recorded calls (the answer's included) against one tool message: the records count
    assert tool_call_count(traj) == 2
    assert tool_call_count(traj.messages) == 1
    assert tool_call_count(Trajectory(prompt_ids=[1], messages=traj.messages)) == 1
    assert tool_call_count(None) == 0 and not used_tool(None) and not used_tool([])


def test_assistant_texts_in_order():
    assert assistant_texts(_trajectory()) == [
        "<tool_call>search</tool_call>",
        "<tool_call>answer</tool_call>",
    ]


def test_tool_call_answer_of_a_trajectory():
    traj = _trajectory()
    assert tool_call_answer(traj) == "Paris"
    traj.num_turns = 3  # a turn without calls came after: no answer through a tool
    assert tool_call_answer(traj) is None


def test_answer_argument_shapes():
    assert answer_argument({"answer": 42}) == "42"
    assert answer_argument('{"answer": "Paris"}') == "Paris"
    assert answer_argument("answer: Paris") == "answer: Paris"  # not JSON: all of it (AgentFly)
    assert answer_argument({"query": "x"}) is None and answer_argument("query") is None
