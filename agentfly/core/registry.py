"""A name → object registry shared by every kind of plug-in (estimators, tools, rewards, agents...).

Registering the same name twice to *different* objects is refused (re-registering the identical
object, as happens when a module is imported twice, is allowed). Looking up an unknown name raises
a ``KeyError`` subclass whose message lists the known names and the closest matches.

Wherever a registered name is accepted, so is a ``module:attr`` spec (``my_pkg.rewards:exact`` or
``path/to/file.py:exact``): :meth:`Registry.get` imports the object (:mod:`agentfly.core.plugins`),
turns it into an entry with the registry's ``coerce`` (a plain function into a tool, an
estimator...), and registers it under the spec, or makes the spec an alias of the name the object
is already registered under (a ``@tool``-decorated function keeps its tool name).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from agentfly.core.errors import InputError
from agentfly.core.plugins import PluginError, import_object, is_object_spec

T = TypeVar("T")


class UnknownNameError(KeyError, InputError):
    """An unknown plug-in name; the message lists the known ones."""

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0]) if self.args else ""


def _describe(obj: Any) -> str:
    """``module.qualname`` of a function or class (or of the function an entry wraps)."""
    target = getattr(obj, "fn", obj)  # a Tool, an AdvantageEstimator
    qualname = getattr(target, "__qualname__", None)
    if qualname is None:
        return repr(obj) if len(repr(obj)) <= 80 else type(obj).__name__
    return f"{getattr(target, '__module__', '?')}.{qualname}"


class Registry(Generic[T]):
    """Maps names (and aliases) to plug-ins of one kind.

    Args:
        kind: what the registry holds, used in error messages ("advantage estimator", "tool").
        coerce: turns an object a ``module:attr`` spec imports into an entry, ``coerce(obj,
            spec)``; raises ``TypeError`` saying what an entry must be. None: entries as imported.
    """

    def __init__(self, kind: str, coerce: Callable[[Any, str], T] | None = None) -> None:
        self.kind = kind
        self._coerce = coerce
        self._items: dict[str, T] = {}
        self._aliases: dict[str, str] = {}

    def register(
        self, name: str, obj: T | None = None, *, aliases: tuple[str, ...] = ()
    ) -> T | Callable[[T], T]:
        """Register ``obj`` under ``name``; without ``obj`` acts as a decorator."""
        if obj is None:

            def decorator(o: T) -> T:
                self.register(name, o, aliases=aliases)
                return o

            return decorator
        for key in (name, *aliases):
            existing = self._lookup(key)
            if existing is not None and existing is not obj:
                raise ValueError(
                    f"{self.kind} {key!r} is already registered to {_describe(existing)}; "
                    f"refusing to register {_describe(obj)} under the same name"
                )
        self._items[name] = obj
        for alias in aliases:
            self._aliases[alias] = name
        return obj

    def _lookup(self, name: str) -> T | None:
        if name in self._items:
            return self._items[name]
        if name in self._aliases:
            return self._items[self._aliases[name]]
        return None

    def _name_of(self, obj: T) -> str | None:
        return next((name for name, item in self._items.items() if item is obj), None)

    def _import(self, spec: str) -> T:
        """Import the object ``spec`` names and register it under ``spec``."""
        obj = import_object(spec)
        if self._name_of(obj) is None and self._coerce is not None:
            try:
                obj = self._coerce(obj, spec)
            except TypeError as e:
                raise PluginError(f"{spec!r} does not name a valid {self.kind}: {e}") from e
        known = self._name_of(obj)
        if known is None:
            self.register(spec, obj)
        elif known != spec:
            self._aliases[spec] = known
        return obj

    def get(self, name: str) -> T:
        """The entry called ``name`` (or an alias), importing a ``module:attr`` spec.

        Raises:
            UnknownNameError: no such name; the message gives close matches and the known names.
            PluginError: a ``module:attr`` spec that cannot be imported or is not a valid entry.
        """
        obj = self._lookup(name)
        if obj is None and is_object_spec(name):
            return self._import(name)
        if obj is None:
            known = self.names(include_aliases=True)
            close = difflib.get_close_matches(str(name), known, n=3)
            hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
            raise UnknownNameError(
                f"unknown {self.kind} {name!r}{hint} (known: {', '.join(known)})"
            )
        return obj

    def canonical(self, name: str) -> str:
        """The registered name behind ``name`` (resolving aliases)."""
        self.get(name)
        return self._aliases.get(name, name)

    def unalias(self, name: str) -> str:
        """The registered name an alias stands for; any other name as it is (nothing imported)."""
        return self._aliases.get(name, name)

    def names(self, include_aliases: bool = False) -> list[str]:
        names = list(self._items)
        if include_aliases:
            names += list(self._aliases)
        return sorted(names)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._lookup(name) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)
