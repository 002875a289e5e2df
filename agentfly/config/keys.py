"""Walk the schema's dataclasses: every leaf key with its type, every section key."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

from agentfly.config.schema import AgentflyConfig


def _leaf_types(cls: type, prefix: str, out: dict[str, Any], nodes: set[str]) -> None:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        key = f"{prefix}{f.name}"
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            nodes.add(key)
            _leaf_types(tp, f"{key}.", out, nodes)
        else:
            out[key] = tp


def schema_keys(cls: type = AgentflyConfig) -> tuple[dict[str, Any], set[str]]:
    """Every leaf key of the schema with its type, and every section (node) key.

    Returns:
        ``(leaves, sections)``: ``{"data.train_batch_size": int, ...}`` and
        ``{"data", "agent.run_config", ...}``, all as dotted paths.
    """
    leaves: dict[str, Any] = {}
    sections: set[str] = set()
    _leaf_types(cls, "", leaves, sections)
    return leaves, sections


def is_dict_type(tp: Any) -> bool:
    """Whether a leaf type is a free-form mapping (``dict[str, Any]``): an open node."""
    return typing.get_origin(strip_optional(tp)) is dict


def is_list_type(tp: Any) -> bool:
    """Whether a leaf type is a list (``list[str]``, ``list[float]``)."""
    return typing.get_origin(tp) is list


def plain(value: Any) -> Any:
    """A config node (``DictConfig``/``ListConfig``) as plain dicts and lists, resolved; any other
    value as it is."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def strip_optional(tp: Any) -> Any:
    """``int | None`` → ``int``; other types unchanged."""
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp
