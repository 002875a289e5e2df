"""The parameters of a class's ``__init__``, read from its source file without importing it.

A config is checked before anything heavy loads: the keys of ``trainer.*`` and ``data.*`` are
parameters of :class:`~agentfly.modules.trainer.AgentflyTrainer` and
:class:`~agentfly.rollout.datamodule.RolloutDataModule`, whose modules import Lightning and torch
(seconds), and the Lightning ``Trainer`` arguments that pass through are ``Trainer.__init__``'s.
:func:`init_parameters` parses the class's file and evaluates each annotation and default in a
namespace of the module's own imports: the light ones imported (``typing``, jsonargparse's types,
agentfly's settings), any other name a stand-in class of the same name. The types are then the
real ones but for those stand-ins (a ``Logger`` in a union is a class named ``Logger``), which is
all a key check reads of them: whether a key takes a list, a mapping, a null
(:func:`agentfly.config.keys.takes`). ``tests/config/test_light_keys.py`` holds them to the
imported signatures, key by key.

Whatever cannot be read this way (a file missing, a syntax this does not know) raises
:class:`SourceUnreadable`, and the caller imports the class instead.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import importlib.util
import sys
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: modules whose names an annotation or default may use, imported when the source names them
LIGHT_MODULES = ("typing", "collections.abc", "pathlib", "jsonargparse.typing", "agentfly.modules.settings")
PACKAGE = Path(__file__).resolve().parents[1]


class SourceUnreadable(Exception):
    """A signature that cannot be read from its source: import the class instead."""


@dataclass(frozen=True)
class Parameter:
    """One parameter: ``kind`` is ``positional`` or ``keyword_only``; ``annotation`` and
    ``default`` are evaluated (``EMPTY`` when absent)."""

    name: str
    kind: str
    annotation: Any
    default: Any


EMPTY = object()


def agentfly_file(module: str) -> Path:
    """The source file of an agentfly module (``agentfly.modules.trainer``)."""
    return PACKAGE.joinpath(*module.split(".")[1:]).with_suffix(".py")


def lightning_trainer_file() -> Path:
    """Lightning's ``trainer/trainer.py``, found without importing Lightning."""
    spec = importlib.util.find_spec("lightning")
    if spec is None or spec.origin is None:
        raise SourceUnreadable("lightning is not installed")
    return Path(spec.origin).parent / "pytorch" / "trainer" / "trainer.py"


def _stand_in(name: str) -> type:
    return type(name, (), {"__module__": "agentfly.config.signatures.stand_in"})


def _namespace(tree: ast.Module) -> dict[str, Any]:
    """The module's imported names: a light module's the real objects, any other a stand-in."""
    names: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            light = node.module in LIGHT_MODULES or node.module in sys.modules
            module = importlib.import_module(node.module) if light else None
            for alias in node.names:
                name = alias.asname or alias.name
                names[name] = getattr(module, alias.name) if module is not None else _stand_in(alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname is not None:
                    names[alias.asname] = _stand_in(alias.asname)
    return names


def _class(tree: ast.Module, name: str) -> ast.ClassDef:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise SourceUnreadable(f"no class {name}")


def _init(cls: ast.ClassDef) -> ast.FunctionDef:
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and node.name == "__init__":
            return node
    raise SourceUnreadable(f"class {cls.name} has no __init__")


def _value(node: ast.expr | None, namespace: dict[str, Any]) -> Any:
    if node is None:
        return EMPTY
    try:
        return eval(compile(ast.Expression(node), "<signature>", "eval"), {"__builtins__": builtins}, namespace)
    except Exception as err:  # a name or construct the namespace lacks
        raise SourceUnreadable(f"cannot evaluate {ast.unparse(node)!r}: {err}") from None


def init_parameters(path: Path, class_name: str, *, evaluate: bool = True) -> list[Parameter]:
    """``class_name.__init__``'s parameters in ``path``, in order, ``self`` and ``**kwargs``
    aside; with ``evaluate=False`` only the names and kinds (annotations and defaults ``EMPTY``).

    Raises:
        SourceUnreadable: the file, the class or a name an annotation uses cannot be had.
    """
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError) as err:
        raise SourceUnreadable(f"{path}: {err}") from None
    init = _init(_class(tree, class_name))
    namespace = {**vars(typing), **_namespace(tree)} if evaluate else {}
    args = init.args
    positional = [*args.posonlyargs, *args.args][1:]  # self
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    out = []
    for arg, default in zip(positional, defaults, strict=True):
        out.append(_parameter(arg, default, "positional", namespace, evaluate))
    for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        out.append(_parameter(arg, default, "keyword_only", namespace, evaluate))
    return out


def _parameter(arg: ast.arg, default: ast.expr | None, kind: str, namespace: dict[str, Any], evaluate: bool) -> Parameter:
    if not evaluate:
        return Parameter(arg.arg, kind, EMPTY, EMPTY)
    return Parameter(arg.arg, kind, _value(arg.annotation, namespace), _value(default, namespace))
