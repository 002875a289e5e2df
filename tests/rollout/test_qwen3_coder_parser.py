"""The ``qwen3_coder`` tool parser reads hand-written Qwen3-Coder turns as vLLM's
``Qwen3CoderToolParser`` does (each expected call written out here from its rules: blocks,
names up to the first ``>``, one newline trimmed on each side of a value, types from the tool's
schema), turns a malformed call into a counted error instead of a crash, writes what it reads,
and is chosen (or refused, naming the known parsers) by ``agent.init_config.tool_parser_name``."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from agentfly.core.registry import UnknownNameError
from agentfly.rollout.agents import TOOL_PARSERS, ParsedTurn, ToolCallRequest, get_agent
from agentfly.rollout.agents.qwen3_coder import parse_qwen3_coder, write_qwen3_coder
from agentfly.rollout.tools import get_tool
from tests.config.cases import BASE, error_of

FILE_TOOLS = [get_tool(n) for n in ("read_file", "edit_file", "create_file", "run_shell_command")]


def parse(text, tools=FILE_TOOLS):
    return parse_qwen3_coder(text, tools).calls


def test_a_turn_of_reasoning_then_a_call_reads_the_call_with_its_integer_converted():
    text = (
        "I'll look at the function first.\n\n"
        "<tool_call>\n<function=read_file>\n<parameter=path>\ntoolkit/core.py\n</parameter>\n"
        "<parameter=start_line>\n10\n</parameter>\n</function>\n</tool_call>"
    )
    assert parse(text) == [ToolCallRequest("read_file", {"path": "toolkit/core.py", "start_line": 10})]


def test_multi_line_values_keep_their_lines_and_indentation_less_one_newline_each_side():
    text = (
        "<tool_call>\n<function=edit_file>\n<parameter=path>\ntoolkit/core.py\n</parameter>\n"
        "<parameter=search_block>\n    for i in range(1, n):\n        total += i\n</parameter>\n"
        "<parameter=replace_block>\n\n    for i in range(1, n + 1):\n\n</parameter>\n"
        "</function>\n</tool_call>"
    )
    (call,) = parse(text)
    assert call.arguments == {
        "path": "toolkit/core.py",
        "search_block": "    for i in range(1, n):\n        total += i",
        "replace_block": "\n    for i in range(1, n + 1):\n",  # only one newline trimmed per side
    }
    # no newline around the value: nothing trimmed; spaces are kept
    assert parse("<function=read_file><parameter=path> a.py </parameter></function>")[0].arguments == {"path": " a.py "}


def test_several_calls_in_order_and_open_blocks_run_to_the_end():
    two = (
        "<tool_call>\n<function=read_file>\n<parameter=path>\na.py\n</parameter>\n</function>\n</tool_call>\n"
        "<tool_call>\n<function=run_shell_command>\n<parameter=cmd>\nls -la\n</parameter>\n</function>\n</tool_call>"
    )
    assert [(c.name, c.arguments) for c in parse(two)] == [
        ("read_file", {"path": "a.py"}), ("run_shell_command", {"cmd": "ls -la"})]
    # the turn stopped mid-call: the open tool_call, function and parameter run to the end
    assert parse("<tool_call>\n<function=run_shell_command>\n<parameter=cmd>\npwd") == [
        ToolCallRequest("run_shell_command", {"cmd": "pwd"})]
    # a parameter left open ends at the next one
    text = "<function=create_file>\n<parameter=path>\nb.py\n<parameter=content>\nx = 1\n</parameter>\n</function>"
    assert parse(text)[0].arguments == {"path": "b.py", "content": "x = 1"}
    # no <tool_call> at all: the whole turn is searched for functions
    assert parse("<function=read_file>\n<parameter=path>\nc.py\n</parameter>\n</function>")[0].name == "read_file"


def test_a_turn_without_a_function_has_no_call_and_a_name_is_read_as_written():
    assert parse("The fix is done; all tests pass.") == []
    assert parse("<tool_call>\n</tool_call>") == []  # no <function= anywhere
    # a <function= outside the blocks is not read when the turn has blocks
    assert parse("<tool_call>\nnothing\n</tool_call>\n<function=read_file>\n</function>") == []
    # the name runs to the first ">", not stripped (the loop then says no such tool exists)
    assert parse("<function= read_file>\n<parameter=path>\na\n</parameter>\n</function>")[0].name == " read_file"
    # a repeated parameter keeps its last value
    assert parse("<function=read_file><parameter=path>a</parameter><parameter=path>b</parameter></function>")[0].arguments == {"path": "b"}


def fake_tool(**properties):
    return SimpleNamespace(name="f", aliases=("g",), parameters={"type": "object", "properties": properties})


@pytest.mark.parametrize("kind, text, value", [
    ("integer", "7", 7), ("integer", "x7", "x7"),
    ("number", "2.5", 2.5), ("number", "3.0", 3), ("number", "1e400", "1e400"),
    ("boolean", "True", True), ("boolean", "yes", False),
    ("object", '{"a": [1, 2]}', {"a": [1, 2]}), ("object", "{'a': 1}", {"a": 1}),
    ("array", "[1, 'x']", [1, "x"]), ("array", "not a list", "not a list"),
    ("string", "42", "42"), ("string", "null", None), ("integer", "NULL", None),
    ("date", "(1, 2)", (1, 2)), ("date", "2024-01-01", "2024-01-01"),  # other types: a Python literal or text
])
def test_values_are_converted_by_the_schema_type(kind, text, value):
    tool = fake_tool(v={"type": kind})
    (call,) = parse(f"<function=f>\n<parameter=v>\n{text}\n</parameter>\n</function>", [tool])
    assert call.arguments == {"v": value} and type(call.arguments["v"]) is type(value)


def test_a_parameter_or_tool_the_schema_lacks_stays_text_and_an_alias_finds_the_schema():
    tool = fake_tool(n={"type": "integer"}, e={"enum": ["a"]})
    assert parse("<function=f><parameter=n>3</parameter><parameter=m>3</parameter></function>", [tool])[0].arguments == {"n": 3, "m": "3"}
    assert parse("<function=g><parameter=n>3</parameter></function>", [tool])[0].arguments == {"n": 3}
    assert parse("<function=h><parameter=n>3</parameter></function>", [tool])[0].arguments == {"n": "3"}
    assert parse("<function=f><parameter=e>[1]</parameter></function>", [tool])[0].arguments == {"e": "[1]"}  # no type: text


@pytest.mark.parametrize("text, name, error", [
    ("<tool_call>\n<function=read_file\n</function>\n</tool_call>", "", "is not closed with '>'"),
    ("<tool_call>\n<function=>\n<parameter=path>\na\n</parameter>\n</function>\n</tool_call>", "", "has no tool name"),
    ("<tool_call>\n<function=read_file>\n<parameter=path\n</function>\n</tool_call>", "read_file", "a <parameter=NAME> tag of the read_file call"),
])
def test_a_malformed_call_is_an_error_call_and_the_turns_other_calls_stand(text, name, error):
    good = "<tool_call>\n<function=read_file>\n<parameter=path>\nok.py\n</parameter>\n</function>\n</tool_call>"
    bad, ok = parse(f"{text}\n{good}")
    assert bad.name == name and error in bad.error and isinstance(bad.arguments, str)
    assert ok == ToolCallRequest("read_file", {"path": "ok.py"})


def test_it_reads_back_what_it_writes():
    calls = [
        ToolCallRequest("edit_file", {"path": "a.py", "search_block": "  x = 1\n", "replace_block": "\n  x = 2"}),
        ToolCallRequest("read_file", {"path": "a.py", "start_line": 3}),
    ]
    text = write_qwen3_coder(calls)
    assert text.startswith("<tool_call>\n<function=edit_file>\n<parameter=path>\na.py\n</parameter>\n")
    assert parse(text) == calls
    typed = fake_tool(o={"type": "object"}, b={"type": "boolean"}, x={"type": "number"})
    call = ToolCallRequest("f", {"o": {"k": [1, None]}, "b": False, "x": 0.5})
    assert parse(write_qwen3_coder([call]), [typed]) == [call]
    for value in ("null", "a</parameter>b", "<parameter=x>"):  # would not read back
        with pytest.raises(ValueError):
            write_qwen3_coder([ToolCallRequest("f", {"v": value})])


def test_tool_parser_name_picks_it_for_any_agent_and_an_unknown_one_is_refused_naming_the_known():
    hermes = get_agent("hermes", FILE_TOOLS, parser="qwen3_coder")  # the ScienceWorld Qwen3.5 script's pair
    assert hermes.parse("<function=read_file><parameter=path>a</parameter></function>") == ParsedTurn(
        calls=[ToolCallRequest("read_file", {"path": "a"})])
    assert "qwen3_coder" in TOOL_PARSERS and "qwen3_coder" not in get_agent.__globals__["AGENTS"]
    with pytest.raises(UnknownNameError) as info:
        get_agent("hermes", FILE_TOOLS, parser="qwen3coder")
    message = str(info.value)
    assert "unknown tool parser 'qwen3coder'" in message and "did you mean 'qwen3_coder'" in message
    assert "known: action, bash_swe, code, gui, hermes, hf, qwen3_coder" in message
    error = error_of([*BASE, "agent.init_config.tool_parser_name=qwen3coder"])
    assert "agent.init_config.tool_parser_name='qwen3coder': unknown tool parser 'qwen3coder'" in error
    assert "agent type" not in error
