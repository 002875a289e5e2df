"""Compose the config: built-in defaults ← ``conf/config.yaml`` ← a YAML file ← overrides.

:func:`load_config` returns an OmegaConf ``DictConfig`` backed by the dataclasses of
:mod:`agentfly.config.schema`: attribute access (``cfg.data.train_batch_size``), every value
type-checked, interpolations resolved, and **read-only** (the config is settled once, when it is
composed; ``OmegaConf.to_object(cfg)`` gives plain dataclass instances,
``OmegaConf.to_container(cfg.actor_rollout_ref.actor.optim)`` a dict of flat keyword arguments).

Every source is normalized the same way: YAML sections are flattened to dotted keys, each key is
mapped to its canonical spelling (:mod:`agentfly.config.aliases`), unknown keys are reported with
close matches, and two spellings of one key with different values in the same source are an
error. Later sources win. Linked nodes (the model path in ``actor_rollout_ref.model.path`` and
``agent.init_config.model_name_or_path``; the sampling temperature/top_p in ``rollout`` and
``agent...generation_config``) take the value set by the latest source; set to different values
by the same source, they are an error naming both. Derived defaults are then filled in
(``clip_ratio_low/high`` from ``clip_ratio``) and the result is validated
(:func:`agentfly.config.validate.validate`). Keys the user set that this run will not use (the
critic's with a critic-free estimator, vLLM's with the transformers engine...) are named in one
``UserWarning`` (:mod:`agentfly.config.inactive`). What depends on the machine (ranks, engines)
is resolved when a run starts (:mod:`agentfly.config.topology`).
"""

from __future__ import annotations

import copy
import difflib
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from agentfly.config.aliases import LINKED, canonical_key, is_alias_prefix, spellings
from agentfly.config.errors import ConfigError
from agentfly.config.keys import is_dict_type, is_list_type, schema_keys, strip_optional
from agentfly.config.overrides import parse_overrides
from agentfly.config.schema import AgentflyConfig
from agentfly.config.validate import validate

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
DEFAULTS_FILE = CONF_DIR / "config.yaml"
# The default task: what `agentfly fit` trains when neither a config file nor data.train_files is given
DEFAULT_TASK_FILE = CONF_DIR / "examples" / "demo_calculator.yaml"
PACKAGE_DIR = Path(__file__).resolve().parents[1]
# ${pkg:demo/model} = a path inside the installed agentfly package, whatever the working directory
if not OmegaConf.has_resolver("pkg"):
    OmegaConf.register_new_resolver("pkg", lambda rel: str(PACKAGE_DIR / rel))
IGNORED_NAMESPACES = ("hydra",)  # accepted for seed compatibility (+hydra.job.chdir=False)

_FILE_RANK, _CLI_RANK = 1, 2  # conf/config.yaml counts as the defaults (rank 0)
_DELETE = object()


@dataclass
class _Entry:
    key: str  # canonical
    spelling: str  # as written
    value: Any
    origin: str
    is_sweep: bool = False
    raw: str = ""
    append: bool = False  # key+=value: add to the list earlier sources left


class _Schema:
    """The schema's keys and types, computed once."""

    def __init__(self) -> None:
        self.leaves, self.sections = schema_keys(AgentflyConfig)
        self.open_nodes = {k for k, tp in self.leaves.items() if is_dict_type(tp)}
        self.known = sorted({*self.leaves, *self.sections, *spellings()})
        self.defaults = OmegaConf.to_container(OmegaConf.structured(AgentflyConfig), resolve=False)

    def open_ancestor(self, key: str) -> str | None:
        """The free-form mapping leaf ``key`` lies inside (``agent.init_config.tool_config``)."""
        parts = key.split(".")
        for i in range(len(parts) - 1, 0, -1):
            prefix = ".".join(parts[:i])
            if prefix in self.open_nodes:
                return prefix
        return None

    def leaf_type(self, key: str) -> Any:
        return self.leaves.get(key, Any)

    def default(self, key: str) -> Any:
        node: Any = self.defaults
        for part in key.split("."):
            node = node[part]
        return node

    def suggest(self, key: str) -> list[str]:
        parent, _, last = key.rpartition(".")
        canon_parent = canonical_key(parent) if parent else ""
        found: list[str] = []
        if canon_parent in self.sections or not parent:
            children = {
                k[len(canon_parent) + 1 :].split(".")[0] if parent else k.split(".")[0]
                for k in self.known
                if not parent or k.startswith(canon_parent + ".")
            }
            found += [
                f"{canon_parent}.{c}" if parent else c
                for c in difflib.get_close_matches(last, sorted(children), n=3, cutoff=0.6)
            ]
        found += difflib.get_close_matches(key, self.known, n=3, cutoff=0.8)
        found += [k for k in self.known if k.endswith("." + key)]
        return [k for k in dict.fromkeys(found) if k != key][:3]

    def unknown(self, spelling: str, origin: str) -> str:
        hint = self.suggest(spelling)
        if spelling.startswith("trainer.") and spelling.count(".") == 1:  # a Lightning argument?
            from agentfly.config.lightning_args import trainer_arguments

            name = spelling.partition(".")[2]
            hint += [f"trainer.{m}" for m in difflib.get_close_matches(name, sorted(trainer_arguments()), n=2)]
        did_you_mean = f"; did you mean {' or '.join(map(repr, hint))}?" if hint else ""
        return f"unknown key {spelling!r} ({origin}){did_you_mean}"


_SCHEMA: _Schema | None = None


def _schema() -> _Schema:
    global _SCHEMA
    if _SCHEMA is None:
        _SCHEMA = _Schema()
    return _SCHEMA


def _flatten(
    schema: _Schema, key: str, value: Any, origin: str, out: list[_Entry], errors: list[str]
) -> None:
    """Turn ``key: value`` (a value may be a nested section) into canonical leaf entries."""
    if key.split(".")[0] in IGNORED_NAMESPACES:
        return
    canon = canonical_key(key) if key else ""
    if isinstance(value, dict) and (
        not key or canon in schema.sections or is_alias_prefix(canon) or is_alias_prefix(key)
    ):
        for k, v in value.items():
            _flatten(schema, f"{key}.{k}" if key else str(k), v, origin, out, errors)
        return
    if canon in schema.leaves or schema.open_ancestor(canon):
        out.append(_Entry(canon, key, value, origin))
    elif canon in schema.sections or is_alias_prefix(canon):
        if value is _DELETE:
            out += [
                _Entry(leaf, key, _DELETE, origin)
                for leaf in schema.leaves
                if leaf.startswith(canon + ".")
            ]
        else:
            errors.append(
                f"{key} is a section, not a value ({origin}); set its keys, e.g. {key}.<name>=..."
            )
    elif (routed := _lightning_argument(canon)) is not None:  # checked with trainer.lightning
        out.append(_Entry(routed, key, value, origin))
    else:
        errors.append(schema.unknown(key, origin))


def _lightning_argument(canon: str) -> str | None:
    """``trainer.lightning.<name>`` for ``trainer.<name>`` naming a ``pl.Trainer`` argument."""
    section, _, name = canon.partition(".")
    if section != "trainer" or not name or "." in name:
        return None
    from agentfly.config.lightning_args import trainer_arguments

    return f"trainer.lightning.{name}" if name in trainer_arguments() else None


def _dedupe(entries: list[_Entry], errors: list[str]) -> list[_Entry]:
    """One entry per canonical key.

    The same spelling twice: the later wins (as in Hydra, so a script's arguments can be
    followed by the user's). Two spellings of one key with different values: an error naming both.
    """
    seen: dict[str, _Entry] = {}
    appends = [e for e in entries if e.append]  # each one adds, in order
    for e in entries:
        if e.append:
            continue
        prev = seen.get(e.key)
        if (
            prev is not None
            and prev.spelling != e.spelling
            and (prev.value is _DELETE or e.value is _DELETE or prev.value != e.value)
        ):
            errors.append(
                f"{prev.spelling!r} and {e.spelling!r} are the same key ({e.key}) with different "
                f"values ({_show(prev.value)} vs {_show(e.value)}) in {e.origin}; give one"
            )
            continue
        seen[e.key] = e
    return [*seen.values(), *appends]


def _show(value: Any) -> str:
    return "<deleted>" if value is _DELETE else repr(value)


def _type_name(tp: Any) -> str:
    base = strip_optional(tp)
    name = getattr(base, "__name__", None) if not is_list_type(base) else str(base)
    return f"{name or base} or null" if base is not tp else str(name or base)


def _apply(cfg: DictConfig, schema: _Schema, entry: _Entry, errors: list[str]) -> bool:
    tp = schema.leaf_type(entry.key)
    value = entry.value
    if value is _DELETE:
        if entry.key not in schema.leaves:  # inside a free-form mapping: drop the item
            parent, _, last = entry.key.rpartition(".")
            node = OmegaConf.select(cfg, parent)
            if OmegaConf.is_dict(node) and last in node:
                del node[last]
            return True
        value = schema.default(entry.key)
    elif entry.is_sweep:
        base = strip_optional(tp)
        if is_list_type(base):
            value = [part.strip() for part in entry.raw.split(",")]
        elif base is not str:
            errors.append(
                f"{entry.spelling}={entry.raw!r} ({entry.origin}): comma-separated values are a "
                f"Hydra sweep, not supported; {entry.key} expects {_type_name(tp)}"
            )
            return False
    if is_list_type(tp):  # a single item or null for a list key: [item] or []
        if value is None:
            value = []
        elif isinstance(value, (str, tuple, dict)):
            value = list(value) if isinstance(value, tuple) else [value]
        if entry.append:
            value = [*OmegaConf.to_container(OmegaConf.select(cfg, entry.key), resolve=False), *value]
    elif entry.append:
        errors.append(f"{entry.spelling}+= ({entry.origin}): {entry.key} is not a list; use {entry.spelling}=")
        return False
    try:  # a mapping into a free-form node merges with what earlier sources put there
        merge = entry.key in schema.open_nodes or entry.key not in schema.leaves
        OmegaConf.update(cfg, entry.key, value, merge=merge)
    except OmegaConfBaseException as exc:
        reason = str(exc).splitlines()[0]
        errors.append(
            f"{entry.spelling}={value!r} ({entry.origin}): expected {_type_name(tp)} ({reason})"
        )
        return False
    return True


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    except (OSError, OmegaConfBaseException, ValueError) as exc:
        raise ConfigError(f"cannot read config file {str(path)!r}: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(path)!r} must hold a mapping of sections")
    return cast(dict[str, Any], data)


def _find_file(config_file: str | Path) -> Path:
    path = Path(config_file).expanduser()
    if path.is_file():
        return path
    beside_repo = CONF_DIR.parent / path
    if not path.is_absolute() and beside_repo.is_file():
        return beside_repo
    raise ConfigError(f"config file {str(config_file)!r} not found")


def _link(cfg: DictConfig, ranks: dict[str, int], errors: list[str]) -> None:
    """Make linked nodes agree: the later source wins; the same source disagreeing is an error."""
    for a, b in LINKED:
        va, vb = OmegaConf.select(cfg, a), OmegaConf.select(cfg, b)
        ra, rb = ranks.get(a, -1), ranks.get(b, -1)
        if va == vb:
            continue
        if ra == rb:
            errors.append(
                f"{a}={va!r} and {b}={vb!r} must agree (set one, or both to the same value)"
            )
        elif ra > rb:
            OmegaConf.update(cfg, b, va, merge=False)
        else:
            OmegaConf.update(cfg, a, vb, merge=False)


def _resolve(cfg: DictConfig, schema: _Schema) -> None:
    """Resolve ``${...}`` interpolations in place; an unresolvable one names its key."""
    try:
        OmegaConf.resolve(cfg)
    except OmegaConfBaseException:
        errors = []
        for key in schema.leaves:
            try:
                OmegaConf.select(cfg, key, throw_on_resolution_failure=True)
            except OmegaConfBaseException as exc:
                errors.append(f"{key}: cannot resolve interpolation ({str(exc).splitlines()[0]})")
        raise ConfigError(errors or ["cannot resolve the config's interpolations"]) from None


def _derive(cfg: DictConfig) -> None:
    """Fill defaults computed from other keys."""
    actor = cfg.actor_rollout_ref.actor
    if actor.clip_ratio_low is None:
        actor.clip_ratio_low = actor.clip_ratio
    if actor.clip_ratio_high is None:
        actor.clip_ratio_high = actor.clip_ratio


_DEFAULTS_CACHE: dict[tuple[str, float], DictConfig] = {}


def _defaults_layer(schema: _Schema) -> DictConfig:
    """The schema's defaults with ``conf/config.yaml`` applied (cached; a fresh copy each call)."""
    if not DEFAULTS_FILE.is_file():
        return OmegaConf.structured(AgentflyConfig)
    stamp = (str(DEFAULTS_FILE), DEFAULTS_FILE.stat().st_mtime)
    if stamp not in _DEFAULTS_CACHE:
        cfg = OmegaConf.structured(AgentflyConfig)
        errors: list[str] = []
        for entry in _entries_from_yaml(schema, DEFAULTS_FILE, errors):
            _apply(cfg, schema, entry, errors)
        if errors:
            raise ConfigError(errors)
        _DEFAULTS_CACHE.clear()
        _DEFAULTS_CACHE[stamp] = cfg
    return copy.deepcopy(_DEFAULTS_CACHE[stamp])


def load_config(
    overrides: list[str] | tuple[str, ...] = (),
    config_file: str | Path | None = None,
    *,
    check_required: bool = True,
    default_task: bool = False,
) -> AgentflyConfig:
    """Compose, resolve and validate the config.

    Args:
        overrides: Hydra-style ``key=value`` arguments, in order (e.g. ``sys.argv`` words).
        config_file: a YAML file in the same nested shape (e.g. ``conf/examples/*.yaml``);
            a relative path not found from the working directory is tried from the repository.
        check_required: require a model path (and a critic path when the estimator trains a
            critic); ``False`` accepts a template such as the bare defaults.
        default_task: when no ``config_file`` is given and no override sets ``data.train_files``,
            layer the default task (``conf/examples/demo_calculator.yaml``, the embedded demo)
            where a config file would go: ``agentfly fit`` with no arguments trains it.

    Returns:
        A read-only structured ``DictConfig`` typed as :class:`AgentflyConfig`.

    Raises:
        ConfigError: listing every unknown key (with close matches), wrongly typed value,
            invalid choice or contradiction found.
    """
    schema = _schema()
    cfg = _defaults_layer(schema)
    errors: list[str] = []
    sources: list[tuple[int, list[_Entry]]] = []
    cli = _entries_from_overrides(schema, overrides, errors)
    names_a_task = any(e.key == "data.train_files" for e in cli)
    if config_file is None and default_task and not names_a_task and DEFAULT_TASK_FILE.is_file():
        config_file = DEFAULT_TASK_FILE
    if config_file is not None:
        sources.append((_FILE_RANK, _entries_from_yaml(schema, _find_file(config_file), errors)))
    sources.append((_CLI_RANK, cli))
    ranks: dict[str, int] = {}
    for rank, entries in sources:
        for entry in entries:
            if _apply(cfg, schema, entry, errors):
                if entry.value is _DELETE:
                    ranks.pop(entry.key, None)
                else:
                    ranks[entry.key] = rank
    if errors:
        raise ConfigError(errors)
    _link(cfg, ranks, errors)
    if errors:
        raise ConfigError(errors)
    _resolve(cfg, schema)
    explicit = set(ranks)
    if not {"actor_rollout_ref.actor.clip_ratio_low", "actor_rollout_ref.actor.clip_ratio_high"} <= explicit:
        explicit.discard("actor_rollout_ref.actor.clip_ratio")  # it sets a side left unset
    _derive(cfg)
    validate(cfg, check_required=check_required)
    OmegaConf.set_readonly(cfg, True)
    _say_inactive(cfg, explicit)
    return cast(AgentflyConfig, cfg)


def _say_inactive(cfg: DictConfig, explicit: set[str]) -> None:
    from agentfly.config.inactive import inactive_settings

    unused = inactive_settings(cfg, explicit)
    if unused:
        warnings.warn(
            "settings with no effect in this run: " + "; ".join(unused), UserWarning, stacklevel=3
        )


def _entries_from_yaml(schema: _Schema, path: Path, errors: list[str]) -> list[_Entry]:
    out: list[_Entry] = []
    _flatten(schema, "", _read_yaml(path), f"file {path.name}", out, errors)
    return _dedupe(out, errors)


def _entries_from_overrides(
    schema: _Schema, args: list[str] | tuple[str, ...], errors: list[str]
) -> list[_Entry]:
    out: list[_Entry] = []
    for ov in parse_overrides(list(args)):
        found: list[_Entry] = []
        value = _DELETE if ov.kind == "delete" else ov.value
        _flatten(schema, ov.key, value, "command line", found, errors)
        for e in found:
            e.is_sweep, e.raw, e.append = ov.is_sweep, ov.raw, ov.kind == "append"
        out += found
    return _dedupe(out, errors)


def config_to_yaml(cfg: Any) -> str:
    """The resolved config as YAML (``--print_config``); takes a DictConfig or the dataclass."""
    if not isinstance(cfg, DictConfig):
        cfg = OmegaConf.structured(cfg)
    return OmegaConf.to_yaml(cfg, resolve=True)
