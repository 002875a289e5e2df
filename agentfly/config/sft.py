"""``agentfly sft``'s command line and config, composed as ``agentfly fit``'s are.

The words are read as ``agentfly fit`` reads its own (:func:`agentfly.config.verl_args.to_cli_args`:
``a.b=c`` and ``--a.b c``, ``--config`` files, aliases, an unknown key refused with close
matches), against ``agentfly sft``'s keys (:mod:`agentfly.config.schema_sft`); a jsonargparse
parser types and checks each value (``trainer.*`` with every Lightning ``Trainer`` argument beside
them, as ``fit``'s). :func:`compose` builds the run's config: ``agentfly fit``'s tree, its RL keys
at their defaults and never read, with the values given here and ``data`` = ``agentfly sft``'s
:class:`~agentfly.config.schema_sft.SFTDataConfig`, so that what the two stages share (topology,
the agent and its template, the model, the Trainer, loggers, resume checks) is planned by the same
functions. :func:`sft_view` is the part of it that is ``agentfly sft``'s (``--print_config``,
``<run>/config.yaml``; ``--config`` reads it back).
"""

from __future__ import annotations

import copy
import functools
import warnings
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from agentfly.config.keys import NONE_MEANS, verl_key_table
from agentfly.config.schema_sft import (
    SFT_ALIASES,
    SFT_MANAGED,
    SHARED_GROUPS,
    TRAINER_NOT_READ,
    SFTDataConfig,
    not_read,
    sft_key_table,
)
from agentfly.config.verl_args import CONF_DIR, _Keys
from agentfly.core.errors import ConfigError

#: what ``agentfly sft`` alone trains: the demo model warm-started on calculator conversations
DEFAULT_SFT_FILE = CONF_DIR / "examples" / "sft_demo.yaml"


@functools.cache
def sft_keys() -> Any:
    """``agentfly sft``'s keys for :func:`~agentfly.config.verl_args.to_cli_args`."""
    return _Keys(sft_key_table(), aliases=SFT_ALIASES, managed=SFT_MANAGED, elsewhere=not_read)


@functools.cache
def sft_parser() -> tuple[Any, dict[str, Any]]:
    """The parser that types ``agentfly sft``'s values, and its ``trainer`` group's defaults."""
    from jsonargparse import ActionConfigFile
    from lightning.pytorch.cli import LightningArgumentParser

    from agentfly.modules.trainer import PLANNED_TRAINER_ARGS, AgentflyTrainer

    parser = LightningArgumentParser(
        prog="agentfly sft", exit_on_error=False,
        description="Supervised fine-tuning of an agent's policy on conversations or on rollout records.",
    )
    parser.add_argument("--config", action=ActionConfigFile, help="a YAML file of keys (several: in order)")
    parser.add_class_arguments(AgentflyTrainer, "trainer", fail_untyped=False, instantiate=False,
                               sub_configs=True, skip=set(PLANNED_TRAINER_ARGS) | TRAINER_NOT_READ)
    parser.add_class_arguments(SFTDataConfig, "data")
    for group, cls, skipped in SHARED_GROUPS:
        parser.add_class_arguments(cls, group, skip=set(skipped))
    return parser, parser.get_defaults().trainer.as_dict()


def parse_sft_config(words: list[str], *, check_required: bool = True, default_task: bool = False) -> DictConfig:
    """The composed config of ``agentfly sft`` for command-line ``words``.

    Args:
        words: ``key=value`` and ``--key value`` words, ``--config`` files.
        check_required: require a model path and training files.
        default_task: with no file and no ``data.train_files``, train the default task
            (``conf/examples/sft_demo.yaml``).

    Raises:
        ConfigError: unknown keys (with close matches), keys of ``agentfly fit`` that
            supervised training does not read (saying why), wrong types, contradictions.
    """
    from jsonargparse import ArgumentError

    from agentfly.config.verl_args import parse_error, to_cli_args

    args, explicit = to_cli_args(words, default_task=default_task, keys=sft_keys(), default_file=DEFAULT_SFT_FILE)
    parser, trainer_defaults = sft_parser()
    try:
        ns = parser.parse_args(args)
    except ArgumentError as exc:
        raise ConfigError(parse_error(exc)) from None
    return compose(sft_tree(ns, trainer_defaults), check_required=check_required, explicit=explicit)


def load_sft_config(
    overrides: list[str] | tuple[str, ...] = (), config_file: str | Path | None = None, *,
    check_required: bool = True,
) -> DictConfig:
    """:func:`parse_sft_config` of ``overrides`` over ``config_file``, as ``agentfly sft`` would."""
    words = ([f"--config={config_file}"] if config_file is not None else []) + list(overrides)
    return parse_sft_config(words, check_required=check_required)


def _fit_defaults() -> dict[str, Any]:
    """``agentfly fit``'s tree at its defaults: copies, since the run's values are merged into it."""
    tree: dict[str, Any] = {}
    for key, (_, default) in verl_key_table()[0].items():
        node = tree
        *path, last = key.split(".")
        for part in path:
            node = node.setdefault(part, {})
        node[last] = list(NONE_MEANS[key]) if default is None and key in NONE_MEANS else copy.deepcopy(default)
    return tree


def _merge(tree: dict[str, Any], values: dict[str, Any]) -> None:
    for key, value in values.items():
        if isinstance(value, dict) and isinstance(tree.get(key), dict):
            _merge(tree[key], value)
        else:
            tree[key] = value


def sft_tree(ns: Any, trainer_defaults: dict[str, Any]) -> dict[str, Any]:
    """The run's tree from the parsed namespace: ``agentfly fit``'s defaults, the parsed values
    over them, ``data`` = ``agentfly sft``'s; the ``Trainer`` arguments that are not agentfly
    keys under ``trainer.lightning`` (those given), as ``agentfly fit`` keeps them."""
    from agentfly.config.load import _plain

    parsed = _plain(ns)
    trainer = parsed.pop("trainer")
    parsed.pop("config", None)
    tree = _fit_defaults()
    _merge(tree, {k: v for k, v in parsed.items() if k != "data"})
    tree["data"] = parsed["data"]
    keys = [k.split(".", 1)[1] for k in sft_key_table()[0] if k.startswith("trainer.")]
    tree["trainer"].update({k: trainer[k] for k in keys if k in trainer})
    if tree["trainer"]["logger"] is None:
        tree["trainer"]["logger"] = list(NONE_MEANS["trainer.logger"])
    tree["trainer"]["callbacks"] = trainer.get("callbacks") or []
    tree["trainer"]["lightning"] = {
        k: v for k, v in trainer.items()
        if k not in keys and k != "callbacks" and v != trainer_defaults.get(k)
    }
    return tree


def compose(tree: dict[str, Any], *, check_required: bool = True, explicit: set[str] | None = None) -> DictConfig:
    """The run's config from :func:`sft_tree`'s tree: resolved, derived, checked, read-only.

    Raises:
        ConfigError: an unresolvable interpolation, or what :func:`validate` finds.
    """
    from agentfly.config.load import _derive
    from agentfly.config.plugins import canonical_names

    try:
        cfg = OmegaConf.create(tree)
        OmegaConf.resolve(cfg)
    except OmegaConfBaseException as exc:
        raise ConfigError(f"{getattr(exc, 'full_key', '')}: {str(exc).splitlines()[0]}") from None
    _derive(cfg)  # agentfly fit's defaults that follow other keys (data.seed = trainer.seed...)
    validate(cfg, check_required=check_required)
    canonical_names(cfg)
    OmegaConf.set_readonly(cfg, True)
    _say_inactive(cfg, explicit or set())
    return cfg


def validate(cfg: DictConfig, *, check_required: bool = True) -> None:
    """Raise :class:`ConfigError` listing every problem: the plug-ins and names
    (:func:`agentfly.config.plugins.plugin_errors`), settings this build cannot honour, and the
    checks across ``agentfly sft``'s keys."""
    from agentfly.config.plugins import plugin_errors
    from agentfly.config.validate import (
        _check_fused_kernels,
        _check_lora,
        _check_model_dtype,
        _check_unsupported,
    )

    get = functools.partial(OmegaConf.select, cfg)
    errors = plugin_errors(get)
    _check_unsupported(get, errors)
    _check_lora(get, errors)
    _check_fused_kernels(get, errors)
    _check_model_dtype(get, errors)
    data = cfg.data
    if check_required and not cfg.actor_rollout_ref.model.path:
        errors.append("actor_rollout_ref.model.path (model.partial_pretrain) is required: the model to fine-tune")
    if check_required and not data.train_files:
        errors.append("data.train_files is required: the conversations (or rollout records) to train on")
    if data.min_reward is not None and data.format != "rollouts":
        errors.append(
            f"data.min_reward={data.min_reward} filters rollout records by their reward "
            f"(data.format=rollouts); data.format={data.format} rows have none"
        )
    micro = data.micro_batch_size_per_gpu
    if micro is not None and micro > data.train_batch_size:
        errors.append(
            f"data.micro_batch_size_per_gpu={micro} is larger than data.train_batch_size="
            f"{data.train_batch_size}"
        )
    if cfg.trainer.resume_mode == "resume_path" and not cfg.trainer.resume_from_path:
        errors.append("trainer.resume_mode=resume_path needs trainer.resume_from_path")
    if errors:
        raise ConfigError(errors)


def _say_inactive(cfg: DictConfig, explicit: set[str]) -> None:
    """Name in one warning the keys given that this run will not use (``agentfly fit``'s rules
    for the keys the two share, and ``data.messages_key`` with rollout records)."""
    from agentfly.config.inactive import inactive_settings

    given = explicit & sft_key_table()[0].keys()
    unused = inactive_settings(cfg, given - {"data.messages_key"})
    if "data.messages_key" in given and cfg.data.format != "messages":
        unused.append(f"data.messages_key (data.format={cfg.data.format}: rows are rollout records)")
    if unused:
        warnings.warn("settings with no effect in this run: " + "; ".join(sorted(unused)), UserWarning, stacklevel=3)


def sft_view(cfg: DictConfig) -> dict[str, Any]:
    """``agentfly sft``'s keys of the composed config, as a tree ``--config`` reads back (the
    ``Trainer`` arguments given and ``trainer.callbacks`` under ``trainer``)."""
    from agentfly.config.keys import plain

    out: dict[str, Any] = {}
    for key in sft_key_table()[0]:
        node = out
        *path, last = key.split(".")
        for part in path:
            node = node.setdefault(part, {})
        node[last] = plain(OmegaConf.select(cfg, key))
    out["trainer"].update(plain(cfg.trainer.lightning) or {})
    if cfg.trainer.callbacks:
        out["trainer"]["callbacks"] = plain(cfg.trainer.callbacks)
    return out


def view_yaml(cfg: DictConfig) -> str:
    """:func:`sft_view` as YAML."""
    import yaml

    return yaml.safe_dump(sft_view(cfg), sort_keys=False)
