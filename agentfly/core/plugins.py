"""A user's own modules, named in the config: ``agent.init_config.plugins`` and ``module:attr``.

Two spellings reach the same mechanism:

- a *plugin* is a module to import for its side effects (its ``@tool``, ``@reward``,
  ``@register_agent``, ``@register_estimator``... decorators register names): a dotted name
  (``my_pkg.my_tools``, importable from ``sys.path``) or a file path (``path/to/file.py``);
- an *object spec* ``module:attr`` (``my_pkg.rewards:exact_match`` or
  ``path/to/file.py:exact_match``) names one object; a registry given such a spec imports it and
  registers it under the spec (see :meth:`agentfly.core.registry.Registry.get`).

A file is imported once per absolute path, under a module name derived from that path, so a
config composed twice in one process (or by several ranks) registers the same objects, never a
second copy; a file also reachable by a dotted name is one module under both spellings. Nothing
here imports more than the user's module.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

from agentfly.core.errors import InputError


class PluginError(InputError):
    """A plugin module or ``module:attr`` object that cannot be imported; says why."""


def is_object_spec(name: object) -> bool:
    """Whether ``name`` is a ``module:attr`` spec (rather than a registered name)."""
    if not isinstance(name, str) or ":" not in name:
        return False
    module, _, attr = name.rpartition(":")
    return bool(module) and all(part.isidentifier() for part in attr.split("."))


def _is_path(spec: str) -> bool:
    return spec.endswith(".py") or "/" in spec or os.sep in spec


def portable(spec: str) -> str:
    """``spec`` with a file path made absolute, so another process (a Ray actor) finds it."""
    module, sep, attr = spec.rpartition(":") if is_object_spec(spec) else (spec, "", "")
    if _is_path(module):
        module = str(Path(module).expanduser().resolve())
    return f"{module}{sep}{attr}"


PLUGIN_PREFIX = "agentfly_plugin_"
"""The module names of plug-in files start with this (they cannot be imported by name)."""

_FILES: dict[str, str] = {}  # module name -> file, of the plug-in files imported as files


def plugin_files() -> list[str]:
    """The plug-in files this process has imported as files (a worker process imports them too
    before it runs a call: their functions cannot be imported by name)."""
    return sorted(file for name, file in list(_FILES.items()) if name in sys.modules)


def _module_name(path: Path) -> str:
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    stem = "".join(ch if ch.isalnum() else "_" for ch in path.stem)
    return f"{PLUGIN_PREFIX}{stem}_{digest}"


def _loaded_from(path: Path) -> ModuleType | None:
    """A module already imported from ``path`` (by a dotted name or as a file), if any."""
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if file and os.path.basename(file) == path.name and Path(file).resolve() == path:
            return module
    return None


def _import_file(path_text: str) -> ModuleType:
    path = Path(path_text).expanduser().resolve()
    if not path.is_file():
        raise PluginError(f"plugin file {path_text!r} not found (looked at {path})")
    name = _module_name(path)
    if name in sys.modules:
        return sys.modules[name]
    loaded = _loaded_from(path)
    if loaded is not None:  # imported by its dotted name: the same objects, not a second copy
        return loaded
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise PluginError(f"cannot import plugin file {str(path)!r} (not a Python module)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before running it: dataclasses and pickling look it up
    try:
        spec.loader.exec_module(module)
    except BaseException as e:
        del sys.modules[name]
        raise PluginError(
            f"importing plugin file {str(path)!r} failed: {type(e).__name__}: {e}"
        ) from e
    _FILES[name] = str(path)
    return module


def import_plugin(spec: str) -> ModuleType:
    """Import the module ``spec`` names: a dotted module name or a ``.py`` file path.

    Raises:
        PluginError: the module is not found or raises while it is imported.
    """
    spec = str(spec).strip()
    if not spec:
        raise PluginError("an empty plugin name")
    if _is_path(spec):
        return _import_file(spec)
    try:
        if spec not in sys.modules:
            found = importlib.util.find_spec(spec)
            origin = Path(found.origin).resolve() if found and found.origin else None
            if origin is not None and _module_name(origin) in sys.modules:  # imported as a file
                sys.modules[spec] = sys.modules[_module_name(origin)]
        return importlib.import_module(spec)
    except ModuleNotFoundError as e:
        if e.name and (
            spec == e.name or spec.startswith(e.name + ".")
        ):  # the plugin itself, not one of its imports
            raise PluginError(
                f"plugin module {spec!r} not found (not importable from sys.path; a file needs a "
                "path such as ./my_tools.py)"
            ) from e
        raise PluginError(
            f"importing plugin module {spec!r} failed: {type(e).__name__}: {e}"
        ) from e
    except Exception as e:
        raise PluginError(
            f"importing plugin module {spec!r} failed: {type(e).__name__}: {e}"
        ) from e


def load_plugins(specs: Iterable[str]) -> list[ModuleType]:
    """Import every plugin module, in order (each once per process)."""
    return [import_plugin(spec) for spec in specs or ()]


def import_object(spec: str) -> Any:
    """The object a ``module:attr`` spec names (``attr`` may be dotted: ``mod:Class.method``).

    Raises:
        PluginError: the module cannot be imported or has no such attribute.
    """
    module_name, _, attr = spec.rpartition(":")
    module = import_plugin(module_name)
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            public = sorted(n for n in vars(module) if not n.startswith("_"))
            raise PluginError(
                f"{module_name!r} has no attribute {attr!r} (it defines: {', '.join(public)})"
            )
        obj = getattr(obj, part)
    return obj
