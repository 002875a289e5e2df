"""Parse Hydra-style ``key=value`` command-line overrides.

Hydra's own grammar (``OverridesParser``) does the work: ``a.b=1``, ``a.b="with spaces"``,
``a.l=[x,y]``, ``a.l=['console','wandb']``, ``a.b=null``, ``5e-7``, ``True``, ``+a.b=1``
(accepted and validated like a plain override: every key already exists), ``~a.b`` (reset to the
built-in default), and quoted values spanning several lines (the WebShop seed passes its system
prompt as ``"agent.init_config.system_prompt=\\"...\\""``, so the shell word carries one level of
quotes, which Hydra strips). Where Hydra's grammar refuses a word (an unbalanced quote, a stray
character in a long prompt), a small fallback splits at the first ``=``, strips one level of
matching surrounding quotes, and types an unquoted value by Hydra's grammar where it accepts the
value alone, else keeps it as text. A word is parsed once per process (AgentFly's and verl's words repeat).

Differences from Hydra: comma-separated values are a Hydra *sweep*; here they are kept as one
string (``raw``) and :mod:`agentfly.config.verl_args` accepts them only for string keys (as text) and
list keys (split at commas). ``hydra.*`` keys are returned too and ignored there (there
is no Hydra job).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import re
from typing import Any

from agentfly.core.errors import ConfigError

_KEY = re.compile(r"^[A-Za-z_][\w\-]*(\.[A-Za-z_0-9][\w\-]*)*$")
_APPEND = re.compile(r"^(?P<key>[A-Za-z_][\w\-]*(?:\.[\w\-]+)*)\+=(?P<value>.*)$", re.S)


@dataclasses.dataclass(frozen=True)
class Override:
    """One parsed ``key=value`` argument.

    Attributes:
        key: the dotted key as written (no ``+``/``++``/``~`` prefix).
        value: the typed value (``None`` for ``null`` and for deletions).
        kind: ``set`` (``a=1``, ``+a=1``, ``++a=1``), ``delete`` (``~a``) or ``append``
            (``a+=x`` or ``a+=[x,y]``: add to a list key, after what earlier sources put there).
        raw: the value text after ``=``, one level of surrounding quotes stripped.
        is_sweep: the value was a Hydra sweep (``a=x,y``); ``value`` is then ``raw``.
    """

    key: str
    value: Any
    kind: str
    raw: str = ""
    is_sweep: bool = False


def _strip_quotes(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    return text


@functools.cache
def _parser() -> Any:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create()


def _fallback(arg: str) -> Override:
    text = arg.strip()
    prefix = re.match(r"^(\+\+|\+|~)?", text).group(0)  # type: ignore[union-attr]
    key, eq, value_text = text[len(prefix) :].partition("=")
    key = _strip_quotes(key)
    if not _KEY.match(key):
        raise ConfigError(f"cannot parse override {arg!r}: {key!r} is not a dotted key")
    if prefix == "~":
        return Override(key, None, "delete")
    if not eq:
        raise ConfigError(f"cannot parse override {arg!r}: expected key=value")
    raw = _strip_quotes(value_text)
    if value_text.strip()[:1] in ("'", '"') and raw != value_text.strip():  # quoted: text
        return Override(key, raw, "set", raw=raw)
    try:  # unquoted: typed as Hydra types the value alone (3, 5e-7, null, [a,b])
        value = _parser().parse_override(f"v={raw}")
    except Exception:
        return Override(key, raw, "set", raw=raw)
    return Override(key, raw if value.is_sweep_override() else value.value(), "set", raw=raw)


def parse_override(arg: str) -> Override:
    """Parse one command-line argument; raises :class:`ConfigError` naming it when it cannot."""
    parsed = _parse(arg)  # the value a copy: the caller may merge into it
    return dataclasses.replace(parsed, value=copy.deepcopy(parsed.value))


@functools.lru_cache(maxsize=4096)
def _parse(arg: str) -> Override:
    from hydra.core.override_parser.types import OverrideType

    append = _APPEND.match(arg)
    if append is not None:  # LightningCLI's list append (trainer.callbacks+=...), not Hydra's
        parsed = _parse(f"{append.group('key')}={append.group('value')}")
        return Override(parsed.key, parsed.value, "append", raw=parsed.raw)
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
        return Override(key, None, "delete", raw=raw)
    if parsed.is_sweep_override():
        return Override(key, raw, "set", raw=raw, is_sweep=True)
    return Override(key, parsed.value(), "set", raw=raw)


def parse_overrides(args: list[str] | tuple[str, ...]) -> list[Override]:
    """Parse command-line overrides in order (later ones are applied later)."""
    return [parse_override(a) for a in args]
