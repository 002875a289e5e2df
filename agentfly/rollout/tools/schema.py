"""JSON schemas for tools, built from a function's type hints and Google-style docstring.

The schema is OpenAI's function-calling format::

    {"type": "function", "function": {"name": ..., "description": ...,
     "parameters": {"type": "object", "properties": {...}, "required": [...]}}}

A parameter is required when it has no default. ``Optional[T]`` / ``T | None`` is described as
``T`` (the model may leave the argument out when it has a default). ``Literal[...]`` becomes an
``enum``. Unannotated parameters (or ``Any``) get an empty schema: any JSON value.

``validate_arguments`` checks a call against the schema: unknown and missing arguments, JSON
types and enums. It coerces an integer to a float where a number is expected, and nothing else.
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable
from typing import Any, Literal, Union

# Parameters the tool runner fills in itself; never shown to the model.
RESERVED_PARAMETERS = frozenset({"resource", "settings"})

_SECTION = re.compile(
    r"^\s*(Args|Arguments|Parameters|Returns|Return|Yields|Raises|Examples?|Notes?|"
    r"Attributes|Warnings?|See Also|Todo)\s*:\s*$"
)
_ARG_LINE = re.compile(r"^(\*{0,2}\w+)\s*(?:\(([^)]*)\))?\s*:\s*(.*)$")

_JSON_TYPES: dict[type, str] = {
    str: "string",
    bool: "boolean",
    int: "integer",
    float: "number",
    list: "array",
    tuple: "array",
    dict: "object",
}


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into its description and per-argument descriptions.

    Args:
        doc: the docstring (may be ``None``).

    Returns:
        The text before the first section header, with paragraphs joined by a blank line, and a
        mapping from argument name to its description (continuation lines joined by spaces).
    """
    lines = inspect.cleandoc(doc or "").splitlines()
    description: list[str] = []
    args: dict[str, str] = {}
    section: str | None = None
    arg_indent: int | None = None
    current: str | None = None
    for line in lines:
        header = _SECTION.match(line)
        if header and not line.startswith((" ", "\t")):
            section = header.group(1).lower()
            arg_indent, current = None, None
            continue
        if section is None:
            description.append(line)
            continue
        if section not in ("args", "arguments", "parameters") or not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if arg_indent is None:
            arg_indent = indent
        match = _ARG_LINE.match(line.strip())
        if indent == arg_indent and match:
            current = match.group(1).lstrip("*")
            args[current] = match.group(3).strip()
        elif current is not None and indent > arg_indent:
            args[current] = f"{args[current]} {line.strip()}".strip()
    text = "\n".join(description).strip()
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text, args


def type_schema(annotation: Any) -> dict[str, Any]:
    """The JSON schema of one Python type annotation.

    Args:
        annotation: a type such as ``str``, ``list[int]``, ``int | None``, ``Literal["a", "b"]``.

    Raises:
        TypeError: for an annotation with no JSON counterpart (a class, a callable...).
    """
    if annotation is inspect.Parameter.empty or annotation is Any:
        return {}
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Union or origin is types.UnionType:
        members = [a for a in args if a is not type(None)]
        if len(members) == 1:
            return type_schema(members[0])
        return {"anyOf": [type_schema(a) for a in members]}
    if origin is Literal:
        kinds = {_JSON_TYPES.get(type(v)) for v in args}
        schema: dict[str, Any] = {"enum": list(args)}
        if len(kinds) == 1 and None not in kinds:
            schema = {"type": kinds.pop(), "enum": list(args)}
        return schema
    if origin in (list, tuple, set, frozenset) or annotation in (set, frozenset):
        schema = {"type": "array"}
        if origin in (list, set, frozenset) and args:
            schema["items"] = type_schema(args[0])
        return schema
    if origin is dict:
        schema = {"type": "object"}
        if len(args) == 2 and args[1] is not Any:
            schema["additionalProperties"] = type_schema(args[1])
        return schema
    if annotation is type(None):
        return {"type": "null"}
    if annotation in _JSON_TYPES:
        return {"type": _JSON_TYPES[annotation]}
    raise TypeError(f"no JSON schema for the annotation {annotation!r}")


def function_schema(fn: Callable[..., Any], name: str, description: str | None = None) -> dict:
    """The OpenAI function-calling schema of ``fn``.

    Args:
        fn: the tool function; ``*args``/``**kwargs`` are refused, parameters named
            ``resource`` and ``settings`` are left out.
        name: the tool's name as the model will call it.
        description: overrides the docstring's description.

    Raises:
        TypeError: for variadic parameters or annotations with no JSON counterpart.
    """
    doc_description, doc_args = parse_docstring(fn.__doc__)
    # Resolve only what the model sees: a resource's type may be importable only for checkers.
    shown = {
        k: v
        for k, v in getattr(fn, "__annotations__", {}).items()
        if k not in RESERVED_PARAMETERS and k != "return"
    }
    hints = typing.get_type_hints(
        types.SimpleNamespace(__annotations__=shown), globalns=getattr(fn, "__globals__", None)
    )
    properties: dict[str, Any] = {}
    required: list[str] = []
    for param in inspect.signature(fn).parameters.values():
        if param.name in RESERVED_PARAMETERS:
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"tool {name!r}: *args/**kwargs cannot be described to the model")
        prop = type_schema(hints.get(param.name, inspect.Parameter.empty))
        if param.name in doc_args:
            prop["description"] = doc_args[param.name]
        properties[param.name] = prop
        if param.default is inspect.Parameter.empty:
            required.append(param.name)
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description if description is not None else doc_description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


def _type_error(value: Any, schema: dict[str, Any]) -> str | None:
    """Why ``value`` does not fit ``schema`` (shallow check), or ``None`` if it does."""
    if "anyOf" in schema:
        if all(_type_error(value, s) for s in schema["anyOf"]):
            return f"{value!r} matches none of the allowed types"
        return None
    if "enum" in schema and value not in schema["enum"]:
        return f"{value!r} is not one of {schema['enum']}"
    expected = schema.get("type")
    checks: dict[str, Callable[[Any], bool]] = {
        "string": lambda v: isinstance(v, str),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
        "boolean": lambda v: isinstance(v, bool),
        "array": lambda v: isinstance(v, list),
        "object": lambda v: isinstance(v, dict),
        "null": lambda v: v is None,
    }
    if expected in checks and not checks[expected](value):
        return f"expected {expected}, got {type(value).__name__} {value!r}"
    return None


def validate_arguments(arguments: dict[str, Any], parameters: dict[str, Any]) -> list[str]:
    """Check arguments against a ``parameters`` schema; coerce int to float for numbers in place.

    Args:
        arguments: the call's arguments (modified in place for the int → float coercion).
        parameters: the ``{"type": "object", "properties": ..., "required": ...}`` schema.

    Returns:
        One message per problem; empty when the arguments are valid.
    """
    properties = parameters.get("properties", {})
    problems = []
    missing = [k for k in parameters.get("required", []) if k not in arguments]
    if missing:
        problems.append(f"missing required argument(s): {', '.join(missing)}")
    unknown = [k for k in arguments if k not in properties]
    if unknown:
        accepted = ", ".join(properties) or "none"
        problems.append(f"unknown argument(s): {', '.join(unknown)} (accepted: {accepted})")
    for key, value in arguments.items():
        schema = properties.get(key)
        if schema is None:
            continue
        problem = _type_error(value, schema)
        if problem:
            problems.append(f"argument {key!r}: {problem}")
        elif schema.get("type") == "number" and isinstance(value, int):
            arguments[key] = float(value)
    return problems
