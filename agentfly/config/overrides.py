"""Parse Hydra-style ``key=value`` command-line overrides.

Hydra's own grammar (``OverridesParser``) does the work: ``a.b=1``, ``a.b="with spaces"``,
``a.l=[x,y]``, ``a.l=['console','wandb']``, ``a.b=null``, ``5e-7``, ``True``, ``+a.b=1``
(accepted and validated like a plain override: every key already exists), ``~a.b`` (reset to the
built-in default), and quoted values spanning several lines (the WebShop seed passes its system
prompt as ``"agent.init_config.system_prompt=\\"...\\""``, so the shell word carries one level of
quotes, which Hydra strips). Where Hydra's grammar refuses a word (an unbalanced quote, a stray
character in a long prompt), a small fallback splits at the first ``=``, strips one level of
matching surrounding quotes, and types an unquoted value as Hydra does (``True``, ``3``,
``5e-7``, ``null``; ``[a,b]`` as a YAML flow list).

Plain words (``key=3``, ``key=Qwen/Qwen2.5-3B-Instruct``) skip Hydra's ANTLR grammar, which is
slow; they are typed by the same rules (a test checks the two agree).

Differences from Hydra: comma-separated values are a Hydra *sweep*; here they are kept as one
string (``raw``) and :mod:`agentfly.config.seed_args` accepts them only for string keys (as text) and
list keys (split at commas). ``hydra.*`` keys are returned too and ignored there (there
is no Hydra job).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml

from agentfly.errors import ConfigError

_KEY = re.compile(r"^[A-Za-z_][\w\-]*(\.[A-Za-z_0-9][\w\-]*)*$")
# Plain words typed exactly as Hydra types them, parsed without its (slow) ANTLR grammar.
_SIMPLE = re.compile(r"^(?P<key>[A-Za-z_][\w\-]*(?:\.[\w\-]+)*)=(?P<value>[\w./:@+\-]*)$")
_INT = re.compile(r"^[-+]?(0|[1-9]\d*)$")
_FLOAT = re.compile(r"^[-+]?(\d+\.\d*|\.\d+|\d+)([eE][-+]?\d+)?$")
_WORD = re.compile(r"^[A-Za-z_./][\w./:@\-]*$")


@dataclass(frozen=True)
class Override:
    """One parsed ``key=value`` argument.

    Attributes:
        key: the dotted key as written (no ``+``/``++``/``~`` prefix).
        value: the typed value (``None`` for ``null`` and for deletions).
        kind: ``set`` (``a=1``, ``+a=1``, ``++a=1``), ``delete`` (``~a``) or ``append``
            (``a+=x`` or ``a+=[x,y]``: add to a list key, after what earlier sources put there).
        text: the argument as given, for error messages.
        raw: the value text after ``=``, one level of surrounding quotes stripped.
        is_sweep: the value was a Hydra sweep (``a=x,y``); ``value`` is then ``raw``.
    """

    key: str
    value: Any
    kind: str
    text: str
    raw: str = ""
    is_sweep: bool = False


def _strip_quotes(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    return text


def _scalar(text: str) -> tuple[bool, Any]:
    """Type a plain word as Hydra does: int, float, bool, null (any case); ``(False, None)`` else."""
    lower = text.lower()
    if _INT.match(text):
        return True, int(text)
    if _FLOAT.match(text):
        return True, float(text)
    if lower in ("true", "false"):
        return True, lower == "true"
    if lower == "null":
        return True, None
    return False, None


def _typed(text: str) -> Any:
    """Type an unquoted fallback value: a scalar as Hydra would, ``[a, b]`` as a list, else text."""
    ok, value = _scalar(text.strip())
    if ok:
        return value
    if text.strip().startswith("[") and text.strip().endswith("]"):
        try:
            items = yaml.safe_load(text)
        except yaml.YAMLError:
            return text
        if isinstance(items, list):
            return items
    return text


def _fallback(arg: str) -> Override:
    text = arg.strip()
    prefix = re.match(r"^(\+\+|\+|~)?", text).group(0)  # type: ignore[union-attr]
    body = text[len(prefix) :]
    key, eq, value_text = body.partition("=")
    key = _strip_quotes(key)
    if not _KEY.match(key):
        raise ConfigError(f"cannot parse override {arg!r}: {key!r} is not a dotted key")
    if prefix == "~":
        return Override(key, None, "delete", arg)
    if not eq:
        raise ConfigError(f"cannot parse override {arg!r}: expected key=value")
    quoted = (
        value_text.strip()[:1] in ("'", '"') and _strip_quotes(value_text) != value_text.strip()
    )
    raw = _strip_quotes(value_text)
    value = raw if quoted else _typed(raw)
    return Override(key, value, "set", arg, raw=raw)


_PARSER: Any = None


def _parser() -> Any:
    global _PARSER
    if _PARSER is None:
        from hydra.core.override_parser.overrides_parser import OverridesParser

        _PARSER = OverridesParser.create()
    return _PARSER


def _simple(arg: str) -> Override | None:
    """``key=word`` with a plain int, float, bool, null or word value; ``None`` otherwise."""
    m = _SIMPLE.match(arg)
    if m is None:
        return None
    key, text = m.group("key"), m.group("value")
    ok, value = _scalar(text)
    if not ok:
        if not _WORD.match(text) or text.lower() in ("inf", "nan"):
            return None
        value = text
    return Override(key, value, "set", arg, raw=text)


_APPEND = re.compile(r"^(?P<key>[A-Za-z_][\w\-]*(?:\.[\w\-]+)*)\+=(?P<value>.*)$", re.S)


def parse_override(arg: str) -> Override:
    """Parse one command-line argument; raises :class:`ConfigError` naming it when it cannot."""
    append = _APPEND.match(arg)
    if append is not None:  # LightningCLI's list append (trainer.callbacks+=...), not Hydra's
        parsed = parse_override(f"{append.group('key')}={append.group('value')}")
        return Override(parsed.key, parsed.value, "append", arg, raw=parsed.raw)
    simple = _simple(arg)
    if simple is not None:
        return simple
    try:
        from hydra.core.override_parser.types import OverrideType
    except ImportError:  # pragma: no cover - hydra-core is a dependency
        return _fallback(arg)
    try:
        parsed = _parser().parse_override(arg)
    except Exception:
        return _fallback(arg)
    key = parsed.key_or_group
    if parsed.package is not None:
        key = f"{parsed.package}.{key}" if parsed.package else key
    if not key:
        raise ConfigError(f"cannot parse override {arg!r}: missing key before '='")
    raw = _strip_quotes(arg.split("=", 1)[1]) if "=" in arg else ""
    if parsed.type == OverrideType.DEL:
        return Override(key, None, "delete", arg, raw=raw)
    if parsed.is_sweep_override():
        return Override(key, raw, "set", arg, raw=raw, is_sweep=True)
    return Override(key, parsed.value(), "set", arg, raw=raw)


def parse_overrides(args: list[str] | tuple[str, ...]) -> list[Override]:
    """Parse command-line overrides in order (later ones are applied later)."""
    return [parse_override(a) for a in args]
