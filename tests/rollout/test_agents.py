"""Agent types read tool calls out of the model's text, each in its own format."""

from __future__ import annotations

import pytest

from agentfly.core.registry import UnknownNameError
from agentfly.rollout.agents import (
    AGENTS,
    Agent,
    ParsedTurn,
    ToolCallRequest,
    get_agent,
    register_agent,
)
from agentfly.rollout.tools import get_tool


def tools(*names):
    return [get_tool(n) for n in names]


def test_hermes_reads_several_calls_and_flags_broken_ones():
    agent = get_agent("hermes", tools("calculator", "answer"))
    text = (
        'Let me compute.\n<tool_call>\n{"name": "calculator", "arguments": {"expression": "2*3"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "answer", "arguments": "{\\"answer\\": \\"6\\"}"}\n</tool_call>\n'
        "<tool_call>\n{oops}\n</tool_call>"
    )
    calls = agent.parse(text).calls
    assert calls[0] == ToolCallRequest("calculator", {"expression": "2*3"})
    assert calls[1] == ToolCallRequest("answer", {"answer": "6"})  # double-encoded arguments
    assert calls[2].error and "not valid JSON" in calls[2].error
    assert agent.parse("The answer is 6.").calls == []
    # the hermes agent shows its tools through the template
    assert [s["function"]["name"] for s in agent.template_tools()] == ["calculator", "answer"]


def test_react_reads_action_and_input_and_final_answer():
    agent = get_agent("react", tools("calculator", "answer"))
    turn = agent.parse('Thought: multiply\nAction: calculator\nInput: {"expression": "7*8"}')
    assert turn.calls == [ToolCallRequest("calculator", {"expression": "7*8"})]
    bare = agent.parse("Thought: x\nAction: calculator\nAction Input: 7*8\nObservation: junk")
    assert bare.calls == [ToolCallRequest("calculator", {"expression": "7*8"})]
    final = agent.parse("Thought: done\nFinal Answer: 56")
    assert final == ParsedTurn(answer="56")
    assert agent.template_tools() is None and "calculator" in agent.system_prompt
    obs = agent.observation_messages(turn.calls, ["56"])
    assert obs == [{"role": "user", "content": "Observation: 56"}]


def test_code_agent_runs_the_last_python_block():
    agent = get_agent("code", tools("python_executor"))
    text = "First:\n```python\nx = 1\n```\nthen\n```python\nprint(x + 1)\n```"
    # python_executor is an alias: the call goes to the canonical tool
    assert agent.parse(text).calls == [ToolCallRequest("code_interpreter", {"code": "print(x + 1)\n"})]
    assert agent.parse("The result is 2.").calls == []


def test_action_agent_reads_turns_as_agentflys_action_agent():
    agent = get_agent("action", tools("webshop_browser_action"))
    shop = "webshop_browser_action"
    turn = agent.parse("<think>look</think> <action> search[red shoes] </action>")
    assert turn.calls == [ToolCallRequest(shop, {"action": "search[red shoes]"})]
    # the first tag counts; the text after the first closing tag is not read
    assert agent.parse("<action>click[a]</action><action>click[b]</action>").calls == [
        ToolCallRequest(shop, {"action": "click[a]"})]
    assert agent.parse("<action></action><action>click[b]</action>").calls == []  # empty, then cut
    assert agent.parse("<summarize>searched twice</summarize> <action>click[b]</action>").calls == [
        ToolCallRequest("summarize", {"summary": "searched twice"})]
    assert get_tool("summarize").fn(summary="searched twice") == "[Previous Summary]: searched twice"
    # "end task" in either tag, or no tag, ends the chain with the turn as its final response
    for done in ("<ACTION>End Task</ACTION>", "<summarize> end task </summarize>", "I am done."):
        assert agent.parse(done).calls == [] and agent.parse(done).answer in (done, None)
    assert agent.parse("<action>end task</action>").answer == "<action>end task</action>"
    # a tool with another parameter name gets the body as its one required argument
    assert get_agent("action", tools("chess_move")).parse("<action>e2e4</action>").calls == [
        ToolCallRequest("chess_move", {"move": "e2e4"})]


def test_unknown_types_list_known_ones():
    with pytest.raises(UnknownNameError, match="react"):
        get_agent("reactt", [])


def test_gui_reads_agentflys_thought_action_turns():
    step = get_agent("gui", tools("gui_step"))
    turn = "Thought: the OK button is low.\nAction: click(start_box='(30,90)')"
    assert step.parse(turn).calls == [ToolCallRequest("gui_step", {"action": "click(start_box='(30,90)')"})]
    # no "Action:" but an action word: read as if it began with "Action:" (AgentFly's reformat)
    assert step.parse("type(content='hello')").calls == [
        ToolCallRequest("gui_step", {"action": "type(content='hello')"})]
    # nothing readable: no call (AgentFly would invent a click at the screen's centre)
    assert step.parse("I am not sure.") == ParsedTurn()
    assert step.parse("Action: click(start_box='(oops)')") == ParsedTurn()  # a bad box: no action
    # AgentFly's one-turn script (pyautogui_code_generator): the turn is the answer gui_reward scores
    one = get_agent("gui", tools("pyautogui_code_generator"))
    assert one.parse(turn) == ParsedTurn(answer=turn)
    assert step.write_calls([ToolCallRequest("gui_step", {"action": "scroll(direction='down')"})]) == (
        "Action: scroll(direction='down')")


def test_a_user_agent_type_registers_by_name():
    @register_agent("test_echo_agent")
    class Echo(Agent):
        def parse(self, text):
            return ParsedTurn(answer=text)

    assert "test_echo_agent" in AGENTS
    assert get_agent("test_echo_agent", []).parse("hi").answer == "hi"
