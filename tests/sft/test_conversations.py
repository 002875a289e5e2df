"""Conversations laid out for SFT: the loss mask is exactly the assistant's tokens (positions
derived by hand), the layout is the agent loop's token for token (a scripted rollout replaying the
same turns), and a row the agent type would not read is named by file and line."""

from __future__ import annotations

import json

import pytest

from agentfly.rollout.agents import get_agent
from agentfly.rollout.agents.base import ToolCallRequest
from agentfly.rollout.collate import collate_trajectories
from agentfly.rollout.data import DataError
from agentfly.rollout.tools import get_tool
from agentfly.sft.conversations import BadRow, ConversationRenderer
from agentfly.sft.examples import ExampleMaker, load_sft_data
from tests.rollout.scripted_loops import call, make_loop
from tests.sft.conversations import hand_renderer, solved, structured


def test_the_mask_is_one_exactly_on_the_assistant_tokens():
    """Characters are tokens, so each piece's positions are its characters, written out here from
    the template's markers: the prompt, each turn with its end marker '|', the text between."""
    messages = solved()
    messages[3] = {"role": "assistant", "content": 'Done.\n<tool_call>\n{"name": "answer", "arguments": {"answer": "5"}}\n</tool_call>'}
    traj = hand_renderer().render(messages)

    prompt = "U:2+3?\nA:"  # no system turn: hermes has no system prompt, the template none by default
    turn1 = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "2+3"}}\n</tool_call>|'
    between = "\nO:5\nA:"  # the rest of turn 1's line, the observation turn, the next prompt
    turn2 = 'Done.\n<tool_call>\n{"name": "answer", "arguments": {"answer": "5"}}\n</tool_call>|'
    assert len(prompt) == 9 and len(between) == 7
    assert traj.prompt_ids == [ord(c) for c in prompt]
    assert traj.response_ids == [ord(c) for c in turn1 + between + turn2]
    assert traj.loss_mask == [1] * len(turn1) + [0] * 7 + [1] * len(turn2)
    # the batch the loss reads: prompt left of the response, the mask on the response
    batch = collate_trajectories([traj], pad_id=0)
    assert batch.prompt_length == 9
    assert batch.response_mask[0].tolist() == traj.loss_mask


def test_a_system_message_replaces_the_agent_system_prompt_and_none_keeps_it():
    react = hand_renderer(agent="react")
    turn = {"role": "assistant", "content": "Final Answer: 5"}
    own = react.render([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+3?"}, turn])
    assert react.tokenizer.decode(own.prompt_ids) == "S:Be brief.\nU:2+3?\nA:"
    default = react.render([{"role": "user", "content": "2+3?"}, turn])
    system = react.agent.system_prompt
    assert system and react.tokenizer.decode(default.prompt_ids) == f"S:{system}\nU:2+3?\nA:"


HERMES_TURNS = [call("calculator", expression="12*34"), call("answer", answer="408")]
REACT_TURNS = ['Thought: multiply.\nAction: calculator\nInput: {"expression": "12*34"}', "Final Answer: 408"]


def conversation(agent: str, form: str) -> list[dict]:
    """12*34 solved with the agent type's turns, its calls as text or as structured tool_calls."""
    user = {"role": "user", "content": "What is 12*34?"}
    result = {"role": "tool", "content": "408"}
    if agent == "react":
        first = {"role": "assistant", "content": REACT_TURNS[0]}
        if form == "structured":
            first = {"role": "assistant", "content": "Thought: multiply.", "tool_calls": [structured("calculator", expression="12*34")]}
        return [user, first, result, {"role": "assistant", "content": REACT_TURNS[1]}]
    if form == "structured":
        return solved("What is 12*34?", "12*34", "408")
    return [user, {"role": "assistant", "content": HERMES_TURNS[0]}, result, {"role": "assistant", "content": HERMES_TURNS[1]}]


@pytest.mark.parametrize("agent, template, script", [
    ("hermes", "qwen2.5", HERMES_TURNS),
    ("react", "qwen-chat", REACT_TURNS),
])
@pytest.mark.parametrize("form", ["text", "structured"])
def test_a_conversation_is_the_chain_a_rollout_of_the_same_turns_records(tiny_model_dir, agent, template, script, form):
    """The format learned is the format parsed: the scripted engine samples the conversation's
    assistant turns through the real agent loop (tool run, observation, template), and the SFT
    example is that chain, ids and mask alike, and collates into the same batch."""
    loop = make_loop(tiny_model_dir, script, agent=agent, template=template)
    (chain,) = loop.run([{"question": "What is 12*34?", "answer": "408"}])
    assert chain.finish_reason == "answer" and chain.tool_calls[0].observation == "408"
    example = ConversationRenderer(loop.agent, loop.template, loop.tokenizer).render(conversation(agent, form))
    assert example.prompt_ids == chain.prompt_ids
    assert example.response_ids == chain.response_ids
    assert example.loss_mask == chain.loss_mask
    assert 0 in chain.loss_mask  # the observation is in the chain, and not trained on
    ours, theirs = collate_trajectories([example], 0), collate_trajectories([chain], 0)
    assert ours.input_ids.equal(theirs.input_ids) and ours.response_mask.equal(theirs.response_mask)


@pytest.mark.parametrize("agent, calls", [
    ("hermes", [ToolCallRequest("calculator", {"expression": "1+1"}), ToolCallRequest("answer", {"answer": "2"})]),
    ("react", [ToolCallRequest("calculator", {"expression": "1+1"})]),
    ("code", [ToolCallRequest("code_interpreter", {"code": "print(1)"})]),
    ("action", [ToolCallRequest("calculator", {"expression": "1+1"})]),
])
def test_each_agent_type_reads_back_the_calls_it_writes(agent, calls):
    tools = [get_tool("code_interpreter" if agent == "code" else "calculator"), get_tool("answer")]
    a = get_agent(agent, tools)
    parsed = a.parse(a.write_calls(calls)).calls
    # the code agent reads the block with its closing newline
    assert [(c.name, c.arguments) for c in parsed] == [
        (c.name, {"code": "print(1)\n"} if agent == "code" else c.arguments) for c in calls
    ]


def write_jsonl(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_bad_rows_are_named_by_file_and_line_then_skipped_and_counted_or_refused(tmp_path):
    good = json.dumps({"messages": solved()})
    no_answer = {"role": "assistant", "content": call("calculator", expression="2+3")}
    lines = [
        good,                                                                      # 1
        "",                                                                        # 2 (blank)
        json.dumps({"messages": [{"role": "user", "content": "hi"}]}),             # 3
        "{oops",                                                                   # 4
        json.dumps({"messages": [{"role": "user", "content": "q"},                 # 5
                                 {"role": "assistant", "content": "<tool_call>\n{no json}\n</tool_call>"}]}),
        json.dumps({"messages": [{"role": "user", "content": "q"},                 # 6
                                 {"role": "assistant", "content": call("search", query="x")}]}),
        json.dumps({"messages": [{"role": "user", "content": "q"}, no_answer,     # 7
                                 {"role": "assistant", "content": "5"}]}),
        json.dumps({"messages": solved(question="2+3? " * 40)}),                   # 8
        json.dumps({"conversation": []}),                                          # 9
    ]
    path = write_jsonl(tmp_path / "rows.jsonl", lines)
    make = ExampleMaker(hand_renderer(), max_length=300)
    data = load_sft_data([str(path)], [], make, bad_rows="skip")
    assert len(data.train.kept) == 1
    expected = {
        3: "no assistant turn",
        4: "not valid JSON",
        5: "does not parse under agent type 'hermes'",
        6: "calls tool 'search', which is not among agent.init_config.tools",
        7: "makes 1 tool call(s), and 0 tool result(s) follow it",
        8: "longer than data.max_length=300",
        9: "no 'messages' field",
    }
    assert len(data.bad) == len(expected)
    for (line, why), said in zip(expected.items(), data.bad, strict=True):
        assert said.startswith(f"{path}:{line}: ") and why in said, said
    assert data.counts["data/train_bad_rows"] == 7 and data.counts["data/train_examples"] == 1
    with pytest.raises(DataError) as refused:
        load_sft_data([str(path)], [], make, bad_rows="error")
    assert all(f"{path}:{line}: " in str(refused.value) for line in expected)


def test_a_json_file_names_its_bad_rows_by_position(tmp_path):
    path = tmp_path / "rows.json"
    path.write_text(json.dumps([{"messages": solved()}, {"messages": [{"role": "user", "content": "q"}]}]))
    data = load_sft_data([str(path)], [], ExampleMaker(hand_renderer()), bad_rows="skip")
    assert data.bad == [f"{path} row 2: no assistant turn: nothing to train on"]


def test_tool_results_must_answer_the_calls_before_them():
    r = hand_renderer()
    extra = solved()
    extra.insert(3, {"role": "tool", "content": "6"})  # two results for one call
    with pytest.raises(BadRow, match=r"makes 1 tool call\(s\), and 2 tool result\(s\)"):
        r.render(extra)
    orphan = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "hm"},
              {"role": "tool", "content": "5"}, {"role": "assistant", "content": "5"}]
    with pytest.raises(BadRow, match=r"makes 0 tool call\(s\), and 1 tool result"):
        r.render(orphan)
