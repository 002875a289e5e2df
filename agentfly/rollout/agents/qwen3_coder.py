"""The ``qwen3_coder`` tool parser: Qwen3-Coder's XML-style tool calls.

::

    <tool_call>
    <function=edit_file>
    <parameter=path>
    app/core.py
    </parameter>
    <parameter=search_block>
        return a - b
    </parameter>
    </function>
    </tool_call>

A turn is read as vLLM's ``qwen3_coder`` parser reads it (``Qwen3CoderToolParser
.extract_tool_calls``, which AgentFly's ``tool_parser_name=qwen3_coder`` builds; the rules of the
parser Qwen publishes with Qwen3-Coder):

- A turn without ``<function=`` has no call.
- Calls are looked for in each ``<tool_call>...</tool_call>`` block (the last one may be left
  open: it runs to the end of the turn), or in the whole turn when it has no ``<tool_call>``;
  in each, every ``<function=...</function>`` (the last may be left open) is one call.
- The tool's name is the text after ``<function=`` up to the first ``>``, as written.
- A parameter runs from ``<parameter=NAME>`` to ``</parameter>``, or, left open, to the next
  ``<parameter=``, ``</function>`` or the end. Its value loses one leading and one trailing
  newline and nothing else, so a multi-line value keeps its lines and their indentation. A
  name given twice keeps the last value.
- Values are converted by the type the tool's schema gives the parameter
  (:func:`convert_value`): ``null`` (any case) is None whatever the type; a parameter the schema
  lacks, or a string type, keeps the text; integers and numbers are parsed (a number without a
  fraction becomes an integer), booleans are ``true`` (any case) or false; objects and arrays are
  read as JSON, then as a Python literal; any other type as a Python literal; a value that does
  not parse stays text.

Departures from vLLM: a malformed call (``<function=`` or ``<parameter=`` without the ``>`` that
ends the name, or an empty tool name) becomes a call with ``error`` set, answered with that
error without running anything and counted with the turn's tool calls, while the turn's other
calls stand; vLLM's parser raises on it, which drops every call of the turn. The tool's schema
is also found by one of its aliases. Later vLLM releases skip a literal ``</parameter>`` or
``</function>`` inside a value and keep ``null`` as text for a string parameter; this parser
keeps the rules above.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable
from typing import Any

from agentfly.rollout.agents.base import Agent, ParsedTurn, ToolCallRequest, register_parser

FUNCTION_PREFIX = "<function="
TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*?)$", re.DOTALL)
FUNCTION = re.compile(r"<function=(.*?)</function>|<function=(.*)$", re.DOTALL)
PARAMETER = re.compile(
    r"<parameter=(.*?)(?:</parameter>|(?=<parameter=)|(?=</function>)|$)", re.DOTALL
)
STRING_TYPES = ("string", "str", "text", "varchar", "char", "enum")
INTEGER_PREFIXES = ("int", "uint", "long", "short", "unsigned")
CONTAINER_TYPES = ("object", "array", "arr")


def function_blocks(text: str) -> list[str]:
    """The text of each call in ``text``: from after ``<function=`` to its ``</function>``."""
    if FUNCTION_PREFIX not in text:
        return []
    bodies = [closed or open_ for closed, open_ in TOOL_CALL.findall(text)] or [text]
    return [closed or open_ for body in bodies for closed, open_ in FUNCTION.findall(body)]


def convert_value(value: str, name: str, properties: dict[str, Any]) -> Any:
    """``value`` converted by the type ``properties`` (the tool's schema) gives parameter ``name``."""
    if value.lower() == "null":
        return None
    if name not in properties:
        return value
    spec = properties[name]
    kind = str(spec["type"]).strip().lower() if isinstance(spec, dict) and "type" in spec else "string"
    if kind in STRING_TYPES:
        return value
    if kind.startswith(INTEGER_PREFIXES):
        try:
            return int(value)
        except ValueError:
            return value
    if kind.startswith(("num", "float")):
        try:
            number = float(value)
            return number if number - int(number) != 0 else int(number)
        except (ValueError, OverflowError):
            return value
    if kind in ("boolean", "bool", "binary"):
        return value.lower() == "true"
    if kind in CONTAINER_TYPES or kind.startswith(("dict", "list")):
        try:
            return json.loads(value)
        except (ValueError, RecursionError):
            pass
    try:
        return ast.literal_eval(value)
    except Exception:  # any text may come: SyntaxError, ValueError, MemoryError, RecursionError
        return value


def read_call(block: str, properties_of: dict[str, dict[str, Any]]) -> ToolCallRequest:
    """One call from its block (see :func:`function_blocks`); a malformed one has ``error`` set."""
    raw = FUNCTION_PREFIX + block
    end = block.find(">")
    if end < 0:
        return ToolCallRequest("", raw, error="a <function=NAME> tag is not closed with '>'")
    name = block[:end]
    if not name:
        return ToolCallRequest("", raw, error="a <function=NAME> tag has no tool name")
    properties = properties_of.get(name, {})
    arguments: dict[str, Any] = {}
    for match in PARAMETER.findall(block[end + 1 :]):
        cut = match.find(">")
        if cut < 0:
            return ToolCallRequest(
                name, raw, error=f"a <parameter=NAME> tag of the {name} call is not closed with '>'"
            )
        value = match[cut + 1 :]
        value = value[1:] if value.startswith("\n") else value
        value = value[:-1] if value.endswith("\n") else value
        arguments[match[:cut]] = convert_value(value, match[:cut], properties)
    return ToolCallRequest(name, arguments)


def schema_properties(tools: Iterable[Any]) -> dict[str, dict[str, Any]]:
    """Each tool's parameter schemas (``properties``), by its name and by each alias."""
    found: dict[str, dict[str, Any]] = {}
    for t in tools:
        properties = t.parameters.get("properties", t.parameters)
        for name in (t.name, *getattr(t, "aliases", ())):
            found.setdefault(name, properties)
    return found


def parse_qwen3_coder(text: str, tools: Iterable[Any] = ()) -> ParsedTurn:
    """The tool calls of one turn (see the module docstring); ``tools`` give the parameter types."""
    properties_of = schema_properties(tools)
    return ParsedTurn(calls=[read_call(block, properties_of) for block in function_blocks(text)])


def written_value(name: str, value: Any) -> str:
    """A value as Qwen3-Coder's chat template writes it (JSON for objects and arrays)."""
    if isinstance(value, str):
        if value.lower() == "null" or "</parameter>" in value or "<parameter=" in value:
            raise ValueError(f"parameter {name!r}: {value[:40]!r} would not read back as written")
        return value
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    return json.dumps(value) if isinstance(value, dict | list) else str(value)


def write_qwen3_coder(calls: Iterable[ToolCallRequest]) -> str:
    """Each call as Qwen3-Coder writes it, one ``<tool_call>`` block per call.

    Raises:
        ValueError: a call whose arguments are not a dict, or a value that would not read back.
    """
    blocks = []
    for call in calls:
        if not isinstance(call.arguments, dict):
            raise ValueError(f"the {call.name} call's arguments are not a dict: {call.arguments!r}")
        params = "".join(
            f"<parameter={key}>\n{written_value(key, value)}\n</parameter>\n"
            for key, value in call.arguments.items()
        )
        blocks.append(f"<tool_call>\n<function={call.name}>\n{params}</function>\n</tool_call>")
    return "\n".join(blocks)


@register_parser("qwen3_coder")
class Qwen3CoderParser(Agent):
    """Reads and writes Qwen3-Coder's tool calls; the tools' schemas go to the chat template."""

    tools_in_template = True

    def parse(self, text: str) -> ParsedTurn:
        return parse_qwen3_coder(text, self.tools)

    def write_calls(self, calls: list[ToolCallRequest]) -> str:
        return write_qwen3_coder(calls)
