"""verl's keys, each with its type and default, read from where they are declared.

``agent``, ``algorithm``, ``actor_rollout_ref``, ``critic`` and ``reward_model`` are the dataclasses of
:mod:`agentfly.config.schema`; ``data.*`` are arguments of
:class:`~agentfly.rollout.datamodule.RolloutDataModule` (:data:`DATA_KEYS`, the others are
computed by the plan) and ``trainer.*`` the keyword arguments of
:class:`~agentfly.modules.trainer.AgentflyTrainer` (Lightning's own are not verl keys). The two
classes' signatures are read from their source (:mod:`agentfly.config.signatures`) while their
modules are not loaded, so a config is checked before Lightning and torch are imported.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import sys
import types
import typing
from functools import cache
from typing import Any

from agentfly.config.schema import AgentConfig, AlgorithmConfig, RewardModelConfig
from agentfly.config.schema_actor_critic import ActorRolloutRefConfig, CriticConfig
from agentfly.config.signatures import (
    EMPTY,
    SourceUnreadable,
    agentfly_file,
    init_parameters,
    lightning_trainer_file,
)

GROUPS: dict[str, type] = {
    "agent": AgentConfig,
    "algorithm": AlgorithmConfig,
    "actor_rollout_ref": ActorRolloutRefConfig,
    "critic": CriticConfig,
    "reward_model": RewardModelConfig,
}
#: the DataModule's arguments that are verl's ``data.*``
DATA_KEYS = (
    "train_files",
    "val_files",
    "train_batch_size",
    "val_batch_size",
    "prompt_key",
    "shuffle",
    "seed",
    "max_prompt_length",
    "filter_overlong_prompts",
    "truncation",
)
#: defaults a signature spells as ``None`` (``trainer.logger=None`` is the console alone)
NONE_MEANS: dict[str, Any] = {"trainer.logger": ["console"], "data.train_files": [], "data.val_files": []}


def _dataclass_keys(instance: Any, prefix: str, out: dict[str, tuple[Any, Any]], nodes: set[str]) -> None:
    hints = typing.get_type_hints(type(instance))
    for f in dataclasses.fields(instance):
        key, value = f"{prefix}{f.name}", getattr(instance, f.name)
        if dataclasses.is_dataclass(value):
            nodes.add(key)
            _dataclass_keys(value, f"{key}.", out, nodes)
        else:
            out[key] = (hints[f.name], value)


def init_table(module: str, class_name: str, *, from_source: bool | None = None) -> dict[str, tuple[Any, Any, str]]:
    """``{name: (annotation, default, kind)}`` of ``class_name.__init__`` in ``module`` (``kind``:
    ``positional`` or ``keyword_only``; ``self`` and ``**kwargs`` aside): read from the source
    (``from_source``; None: when the module is not loaded yet and its source can be read), else
    from the imported class's signature."""
    if from_source is None:
        from_source = module not in sys.modules
    if from_source:
        try:
            return {p.name: (p.annotation, p.default, p.kind) for p in init_parameters(agentfly_file(module), class_name)}
        except SourceUnreadable:
            pass
    cls = getattr(importlib.import_module(module), class_name)
    params = inspect.signature(cls.__init__, eval_str=True).parameters
    return {
        n: (p.annotation, EMPTY if p.default is p.empty else p.default,
            "keyword_only" if p.kind is p.KEYWORD_ONLY else "positional")
        for n, p in params.items() if n != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    }


def lightning_trainer_names(*, from_source: bool | None = None) -> frozenset[str]:
    """The arguments of Lightning's ``Trainer``: from its source while Lightning is not loaded
    (``from_source``, as :func:`init_table`), else from its signature."""
    if from_source is None:
        from_source = "lightning.pytorch" not in sys.modules
    if from_source:
        try:
            return frozenset(p.name for p in init_parameters(lightning_trainer_file(), "Trainer", evaluate=False))
        except SourceUnreadable:
            pass
    import lightning.pytorch as pl

    return frozenset(set(inspect.signature(pl.Trainer.__init__).parameters) - {"self"})


def _argument_keys(table: dict[str, tuple[Any, Any, str]], prefix: str, names: tuple[str, ...], out: dict[str, tuple[Any, Any]]) -> None:
    for name in names:
        tp, default, _ = table[name]
        key = f"{prefix}{name}"
        out[key] = (tp, NONE_MEANS.get(key, default) if default is None else default)


def build_key_table(*, from_source: bool | None = None) -> tuple[dict[str, tuple[Any, Any]], frozenset[str]]:
    """:func:`verl_key_table`, the signatures read as :func:`init_table` reads them."""
    leaves: dict[str, tuple[Any, Any]] = {}
    sections = {"data", "trainer", *GROUPS}
    for name, cls in GROUPS.items():
        _dataclass_keys(cls(), f"{name}.", leaves, sections)
    data = init_table("agentfly.rollout.datamodule", "RolloutDataModule", from_source=from_source)
    _argument_keys(data, "data.", DATA_KEYS, leaves)
    trainer = init_table("agentfly.modules.trainer", "AgentflyTrainer", from_source=from_source)
    names = tuple(n for n, (_, _, kind) in trainer.items() if kind == "keyword_only" and n != "callbacks")  # Lightning's
    _argument_keys(trainer, "trainer.", names, leaves)
    return leaves, frozenset(sections)


@cache
def verl_key_table() -> tuple[dict[str, tuple[Any, Any]], frozenset[str]]:
    """``({key: (type, default)}, sections)`` for every verl key, as dotted paths."""
    return build_key_table()


def plain(value: Any) -> Any:
    """A config node (``DictConfig``/``ListConfig``) as plain dicts and lists, resolved; any other
    value as it is."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def takes(tp: Any, origin: type) -> bool:
    """Whether a leaf type, ``None`` aside, is an ``origin[...]`` (``list[str] | None`` takes a list,
    ``dict[str, Any]`` a free-form mapping: an open node)."""
    args = typing.get_args(tp) if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union else ()
    members = [a for a in args if a is not type(None)]
    return typing.get_origin(members[0] if len(members) == 1 else tp) is origin
