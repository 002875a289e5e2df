"""Per-run tool settings: what a tool accepts, type checks, and binding them to a copy of the tool.

A tool declares its own settings with ``@tool(settings=SomeClass)``: the keyword parameters of
``SomeClass`` (a dataclass's fields, a constructor's keyword arguments) are the settings it
accepts, typed by their annotations. Every tool also accepts ``timeout`` and ``max_output_chars``
(and a stateful one ``max_resources``), which replace the limits given to ``@tool``.

``agent.init_config.tool_config.<tool>.<setting>`` reaches :func:`configure_tool`, which checks
the names and types, builds ``SomeClass(**settings)`` and returns a copy of the tool holding that
instance; the function receives it as its ``settings`` parameter (and a stateful tool's
``resource_factory`` too, when it takes ``settings``). The registered tool is never changed, so
two runs in one process may configure the same tool differently.

A settings class may also say what keeps the tool from running on this machine with those
settings (a program it needs is missing) with a method ``environment_problem() -> str | None``;
:func:`configure_tool` refuses the settings when it answers, so the config is refused when it is
composed (the code interpreter's bubblewrap check).
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import os
import types
import typing
from collections import abc
from collections.abc import Callable, Mapping
from pathlib import PurePath
from typing import Any, Literal, Protocol, TypeVar, Union

from agentfly.core.errors import InputError


class ConfigurableTool(Protocol):
    """What binding settings reads of a tool: a :class:`~agentfly.rollout.tools.base.Tool`
    (a frozen dataclass, copied with ``dataclasses.replace``)."""

    name: str
    stateful: bool
    settings_type: Callable[..., Any] | None
    settings: Any


ToolT = TypeVar("ToolT", bound=ConfigurableTool)

#: settings every tool accepts: they replace the limits given to ``@tool``
COMMON_SETTINGS: dict[str, Any] = {"timeout": float, "max_output_chars": int}
#: accepted by stateful tools only
STATEFUL_SETTINGS: dict[str, Any] = {"max_resources": int}


class ToolSettingsError(InputError):
    """Settings a tool does not accept, of the wrong type, or refused by its settings class."""


@dataclasses.dataclass(frozen=True)
class Setting:
    """One accepted setting: its type annotation and whether it must be given."""

    annotation: Any = Any
    required: bool = False


def _hints(factory: Callable[..., Any]) -> dict[str, Any]:
    target = factory
    if isinstance(factory, type) and not dataclasses.is_dataclass(factory):
        target = factory.__init__
    try:
        return typing.get_type_hints(target)
    except Exception:  # an annotation only a type checker can resolve: judged by the factory
        return {}


def declared_settings(factory: Callable[..., Any]) -> tuple[dict[str, Setting], bool]:
    """The keyword settings ``factory`` takes, and whether it also takes ``**kwargs``."""
    hints = _hints(factory)
    out: dict[str, Setting] = {}
    var_keyword = False
    for p in inspect.signature(factory).parameters.values():
        if p.kind is p.VAR_KEYWORD:
            var_keyword = True
        elif p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            out[p.name] = Setting(hints.get(p.name, Any), p.default is p.empty)
    return out, var_keyword


def accepted_settings(tool: ConfigurableTool) -> dict[str, Setting]:
    """Every setting ``tool`` accepts, by name (its own and the common ones)."""
    accepted = {name: Setting(tp) for name, tp in COMMON_SETTINGS.items()}
    if tool.stateful:
        accepted.update({name: Setting(tp) for name, tp in STATEFUL_SETTINGS.items()})
    if tool.settings_type is not None:
        accepted.update(declared_settings(tool.settings_type)[0])
    return accepted


def describe_type(tp: Any) -> str:
    """``int``, ``str or null``, ``one of 'bm25', 'http'``: a type as a config user reads it."""
    if tp is Any:
        return "any value"
    if tp is type(None):
        return "null"
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Literal:
        return "one of " + ", ".join(map(repr, args))
    if origin in (Union, types.UnionType):
        return " or ".join(describe_type(a) for a in args)
    if isinstance(tp, type) and issubclass(tp, (PurePath, os.PathLike)):
        return "a path"
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def matches_type(value: Any, tp: Any) -> bool:
    """Whether a config value fits the annotation (unknown annotations are left to the class)."""
    if tp is Any or tp is inspect.Parameter.empty:
        return True
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        return any(matches_type(value, a) for a in args)
    if origin is Literal:
        return value in args
    if tp is type(None):
        return value is None
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(tp, type) and issubclass(tp, (PurePath, os.PathLike)):
        return isinstance(value, (str, os.PathLike))
    base = origin or tp
    if base is abc.Sequence or base in (list, tuple, set, frozenset):
        if not isinstance(value, (list, tuple)):
            return False
        item = (
            args[0] if args and (base is not tuple or (len(args) == 2 and args[1] is ...)) else Any
        )
        return all(matches_type(v, item) for v in value)
    if base in (dict, abc.Mapping):
        return isinstance(value, Mapping)
    if isinstance(base, type):
        return isinstance(value, base)
    return True


def check_settings(tool: ConfigurableTool, values: Mapping[str, Any]) -> list[str]:
    """The problems with ``values`` as settings of ``tool`` (unknown names, wrong types)."""
    accepted = accepted_settings(tool)
    var_keyword = tool.settings_type is not None and declared_settings(tool.settings_type)[1]
    listing = ", ".join(sorted(accepted))
    problems = []
    for name, value in values.items():
        if name not in accepted:
            if var_keyword:
                continue
            close = difflib.get_close_matches(str(name), list(accepted), n=2)
            hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
            problems.append(
                f"tool {tool.name!r} has no setting {name!r}{hint} (accepted: {listing})"
            )
        elif not matches_type(value, accepted[name].annotation):
            problems.append(
                f"tool {tool.name!r} setting {name}={value!r}: expected "
                f"{describe_type(accepted[name].annotation)}, got {type(value).__name__}"
            )
    missing = [n for n, s in accepted.items() if s.required and n not in values]
    if missing:
        problems.append(
            f"tool {tool.name!r} needs the setting(s) {', '.join(missing)} (accepted: {listing})"
        )
    for name in ("timeout", "max_output_chars", "max_resources"):
        value = values.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not value > 0:
            problems.append(f"tool {tool.name!r} setting {name}={value!r} must be positive")
    return problems


def configure_tool(tool: ToolT, values: Mapping[str, Any] | None = None) -> ToolT:
    """A copy of ``tool`` with ``values`` bound: its own settings built, the limits replaced.

    Args:
        tool: a registered tool.
        values: setting name → value, as in ``agent.init_config.tool_config.<tool>``.

    Raises:
        ToolSettingsError: an unknown setting (with close matches and the accepted ones), a
            value of the wrong type, a missing required one, the settings class refusing
            the values, or its ``environment_problem()`` (its message, prefixed with the tool's
            name).
    """
    values = dict(values or {})
    problems = check_settings(tool, values)
    if problems:
        raise ToolSettingsError("; ".join(problems))
    limits = {k: values.pop(k) for k in (*COMMON_SETTINGS, *STATEFUL_SETTINGS) if k in values}
    settings = tool.settings
    if tool.settings_type is not None:
        try:
            settings = tool.settings_type(**values)
        except (TypeError, ValueError, OSError) as e:
            raise ToolSettingsError(f"tool {tool.name!r}: {e}") from e
    problem = getattr(settings, "environment_problem", None)
    if callable(problem) and (why := problem()) is not None:
        raise ToolSettingsError(f"tool {tool.name!r}: {why}")
    return dataclasses.replace(tool, settings=settings, **limits)
