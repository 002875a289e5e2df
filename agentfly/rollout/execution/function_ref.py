"""Functions sent to a worker process by name instead of by value.

cloudpickle copies a function by value when its module attribute is not the function itself,
which is the case of every ``@tool`` (the attribute is the ``Tool``): by value, each call would
also carry the module globals the function reads (an index, a table). :func:`by_reference`
names such a function by module and qualified name (:class:`FunctionRef`), and the worker
imports the module once and calls the function it holds.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["FunctionRef", "by_reference"]


@dataclass(frozen=True)
class FunctionRef:
    """A function named by module and qualified name, resolved where it is called (a
    ``Tool``'s ``fn`` when the attribute is a ``Tool``)."""

    module: str
    qualname: str

    def resolve(self) -> Callable[..., Any]:
        return _resolve(self.module, self.qualname)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.resolve()(*args, **kwargs)


_resolved: dict[tuple[str, str], Callable[..., Any]] = {}


def _resolve(module: str, qualname: str) -> Callable[..., Any]:
    key = (module, qualname)
    if key not in _resolved:
        obj: Any = sys.modules.get(module) or importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        fn = getattr(obj, "fn", obj)  # a Tool holds its function
        if not callable(fn):
            raise TypeError(f"{module}:{qualname} is not callable")
        _resolved[key] = fn
    return _resolved[key]


def by_reference(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` as a :class:`FunctionRef` when its module attribute is it (or a ``Tool`` holding
    it), else ``fn`` itself (cloudpickle copies it by value: a lambda, a local function)."""
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not module or module == "__main__" or "<locals>" in qualname or not qualname:
        return fn
    obj: Any = sys.modules.get(module)
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    if obj is fn or getattr(obj, "fn", None) is fn:
        return FunctionRef(module, qualname)
    return fn
