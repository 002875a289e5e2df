"""The ``agentfly`` command line: a ``LightningCLI`` with verl's keys on top.

``agentfly fit|validate|test|predict`` is :class:`~agentfly.cli.lightning.AgentflyCLI` (imported
on first use), a ``lightning.pytorch.cli.LightningCLI``: ``--help`` lists every key with its type
and default, ``--print_config`` prints a config that ``--config`` reads back, ``--model.class_path`` /
``--data.class_path`` choose a subclass of :class:`~agentfly.modules.rl_module.AgentRLModule` /
:class:`~agentfly.rollout.datamodule.RolloutDataModule` (with its own ``init_args``),
``--trainer.callbacks``/``--trainer.logger`` take class paths with ``init_args``, ``--ckpt_path``
names the checkpoint, and the parsed config is saved as ``config.yaml`` in the run directory.

The groups: ``trainer`` is :class:`~agentfly.modules.trainer.AgentflyTrainer` (Lightning's arguments and
the RL loop's ``save_freq``, ``test_freq``, ``total_training_steps``...), ``data`` is the
DataModule's arguments (verl's ``data.*``), ``agent``, ``algorithm``, ``actor_rollout_ref``
and ``critic`` are verl's sections (typed dataclasses, :mod:`agentfly.config.schema`).
What the module and the DataModule receive beyond that is computed from all of them by
:func:`agentfly.run.plan.plan_run` (per-rank batches, schedule lengths, engines), so the module's
own planned arguments are not keys. AgentFly's and verl's words (``a.b=c``, ``agent.max_turns=3``,
``trainer.logger=['console','wandb']``) and their YAML files are translated first
(:mod:`agentfly.config.verl_args`); ``python -m agentfly.cli train ...`` is ``fit``.

``agentfly rollout [--config FILE] [key=value ...] --output OUT.jsonl`` runs rollouts alone with
the same config and writes one JSON line per chain plus a summary.

``agentfly sft [--config FILE] [key=value ...]`` is supervised fine-tuning (:mod:`agentfly.run.sft`),
with the keys ``fit`` shares with it and its own ``data.*``.

``fit`` and ``rollout`` end in order on SIGTERM as on an error (:mod:`agentfly.core.shutdown`): the
engines, the tool workers and a Ray they started are stopped before the process exits (143).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentfly import __version__

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from agentfly.cli.lightning import AgentflyCLI
    from agentfly.rollout.rollout_plan import RolloutPlan
    from agentfly.run.topology import Hardware

STAGES = ("fit", "validate", "test", "predict")
logger = logging.getLogger(__name__)
# LightningCLI 2.6 calls an API jsonargparse deprecates; nothing for an agentfly user to act on
os.environ.setdefault("JSONARGPARSE_DEPRECATION_WARNINGS", "off")


def _cli_class() -> type[AgentflyCLI]:
    """:class:`~agentfly.cli.lightning.AgentflyCLI`, imported on first use (importing Lightning and
    the module is slow)."""
    from agentfly.cli.lightning import AgentflyCLI

    return AgentflyCLI


def __getattr__(name: str) -> Any:
    """``agentfly.cli.AgentflyCLI``, imported when first asked for."""
    if name == "AgentflyCLI":
        return _cli_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def parse_config(words: list[str], *, check_required: bool = True, default_task: bool = False) -> Any:
    """The composed config for command-line ``words``, as ``agentfly fit`` parses them (with one
    parser per process: building it from the signatures is most of the cost)."""
    from jsonargparse import ArgumentError

    from agentfly.config.load import compose, verl_tree
    from agentfly.config.verl_args import parse_error, to_cli_args
    from agentfly.core.errors import ConfigError

    args, explicit = to_cli_args(words, default_task=default_task)
    parser, trainer_defaults = _config_parser()
    try:
        ns = parser.parse_args(args)
    except ArgumentError as exc:
        raise ConfigError(parse_error(exc)) from None
    return compose(verl_tree(ns, trainer_defaults), check_required=check_required, explicit=explicit)


def load_config(
    overrides: list[str] | tuple[str, ...] = (),
    config_file: str | Path | None = None,
    *,
    check_required: bool = True,
    default_task: bool = False,
) -> DictConfig:
    """Parse ``overrides`` (AgentFly's and verl's words or LightningCLI flags) over ``config_file`` as
    ``agentfly fit`` would, and compose the run's config.

    Args:
        overrides: command-line words, in order.
        config_file: a YAML file (verl's sections, or a LightningCLI config); a relative path
            not found from the working directory is tried from the repository.
        check_required: require a model path (and a critic path when the estimator trains a
            critic); ``False`` accepts a template such as the bare defaults.
        default_task: with no file and no ``data.train_files``, train the default task.

    Raises:
        ConfigError: unknown keys (with close matches), wrong types, invalid choices,
            contradictions.
    """
    words = ([f"--config={config_file}"] if config_file is not None else []) + list(overrides)
    return parse_config(words, check_required=check_required, default_task=default_task)


@functools.cache
def _config_parser() -> tuple[Any, dict[str, Any]]:
    """``agentfly fit``'s parser without the subcommand, and the trainer group's defaults."""
    cli = _cli_class()([], run=False, parse_only=True, check_required=False, explicit=set())
    return cli.parser, cli.parser.get_defaults().trainer.as_dict()


def stage_help(stage: str) -> str:
    """``agentfly <stage> --help``: the keys users set most (``--help-all``: every key)."""
    from agentfly.cli.lightning import default_data_parser
    from agentfly.config.help_page import fit_help
    from agentfly.config.verl_args import verl_keys

    return fit_help(stage, _config_parser()[0], default_data_parser(), verl_keys().defaults)


def _lightning(stage: str, words: list[str]) -> int:
    from agentfly.config.verl_args import to_cli_args
    from agentfly.core.errors import ConfigError

    if "-h" in words or "--help" in words:
        print(stage_help(stage))
        return 0
    words = ["--help" if w == "--help-all" else w for w in words]
    try:  # the keys checked before Lightning and torch load (seconds, not a minute)
        args, explicit = to_cli_args(words, default_task=True)
    except ConfigError as e:
        print(f"agentfly: config error: {e}", file=sys.stderr)
        return 2
    from agentfly.core.shutdown import ray_stopped_at_exit, sigterm_exits
    from agentfly.run.errors import USER_ERRORS
    from agentfly.run.resume import RunComplete

    try:
        with sigterm_exits(), ray_stopped_at_exit(), contextlib.ExitStack() as stack:
            cli = _cli_class()([stage, *args], explicit=explicit, stack=stack)
    except SystemExit as e:  # --help, --print_config: printed, nothing to run
        if e.code in (0, None):
            return 0
        raise
    except RunComplete as e:  # nothing to train: said, and done
        print(f"agentfly: {e}", file=sys.stderr)
        return 0
    except ConfigError as e:
        print(f"agentfly: config error: {e}", file=sys.stderr)
        return 2
    except USER_ERRORS as e:  # anything else is a bug: its traceback
        print(f"agentfly: {e}", file=sys.stderr)
        return 2
    shown = {k: round(v, 4) for k, v in sorted(cli.metrics.items()) if k.startswith(("val/", "training/reward"))}
    print(json.dumps(shown, indent=2))
    return 0


def plan_rollout_run(
    cfg: Any, *, split: str = "train", limit: int | None = None, hardware: Hardware | None = None
) -> tuple[RolloutPlan, list[dict[str, Any]]]:
    """What ``agentfly rollout`` runs: the rollout plan on this machine and the rows to roll out.

    Args:
        cfg: the composed config.
        split: ``train`` or ``val``: which data files.
        limit: keep only the first ``limit`` rows (None: all).
        hardware: the machine (None: detected); the CPU fallback's notes are said once.

    Returns:
        The rollout plan (:func:`agentfly.run.plan.plan_rollout`) and the rows.

    Raises:
        ConfigError: ``data.<split>_files`` is not set.
        ConfigError: a model path that cannot be had (a missing folder, a Hub id neither cached
            nor reachable).
    """
    from agentfly.core.errors import ConfigError
    from agentfly.models.paths import resolve_model_paths
    from agentfly.rollout.data import load_rows
    from agentfly.run.plan import plan_rollout
    from agentfly.run.topology import Hardware, resolve_topology

    files = list(getattr(cfg.data, f"{split}_files"))
    if not files:
        raise ConfigError(f"data.{split}_files is not set: nothing to roll out")
    rows = [row for f in files for row in load_rows(f, cfg.data.prompt_key)]
    if limit is not None:
        rows = rows[:limit]
    topology = resolve_topology(cfg, hardware or Hardware.detect())
    for note in topology.notes:
        logger.warning("%s", note)
    plan_rollout(cfg, topology)  # the cheap checks first, then a Hub id is resolved
    return plan_rollout(resolve_model_paths(cfg, needs_critic=False), topology), rows


CONFIG_WORDS = "agentfly {command} [--config FILE] [KEY=VALUE | --KEY VALUE ...] [options]"
CONFIG_EPILOG = (
    "--config FILE and KEY=VALUE words are agentfly fit's (a.b=c, +a.b=c, ~a.b, a.l=[x,y]); "
    "`agentfly fit --help` lists the keys set most, `agentfly fit --help-all` every key."
)


def _options_and_config(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[Any, Any] | None:
    """A command's own options and the config its other words compose (the task's defaults
    beneath); None, said on stderr, when the config is refused."""
    from agentfly.config import ConfigError

    args, words = parser.parse_known_args(argv)
    try:
        return args, parse_config(words, check_required=False, default_task=True)
    except ConfigError as e:
        print(f"agentfly: config error: {e}", file=sys.stderr)
        return None


def _rollout(argv: list[str]) -> int:
    from agentfly.config import config_to_yaml
    from agentfly.rollout.runner import run_rollout

    parser = argparse.ArgumentParser(
        prog="agentfly rollout", usage=CONFIG_WORDS.format(command="rollout"), epilog=CONFIG_EPILOG,
        description="Run rollouts alone with the config fit would train with, and write one JSON line per "
                    "chain (the system prompt and tool schemas the model saw, its turns, tool calls, "
                    "observations, reward, finish reason), then a summary.",
    )
    parser.add_argument("--output", "-o", default="rollouts.jsonl", help="where to write the chains")
    parser.add_argument("--split", choices=["train", "val"], default="train", help="which data files")
    parser.add_argument("--limit", type=int, help="roll out only the first N rows")
    parser.add_argument("--print_config", action="store_true", help="print the composed config and exit")
    parsed = _options_and_config(parser, argv)
    if parsed is None:
        return 2
    args, cfg = parsed
    if args.print_config:
        print(config_to_yaml(cfg))
        return 0
    from agentfly.core.shutdown import ray_stopped_at_exit, sigterm_exits
    from agentfly.run.errors import USER_ERRORS

    try:
        with sigterm_exits(), ray_stopped_at_exit():
            plan, rows = plan_rollout_run(cfg, split=args.split, limit=args.limit)
            summary = run_rollout(plan, rows, args.output, prompt_key=cfg.data.prompt_key)
    except USER_ERRORS as e:
        print(f"agentfly: {e}", file=sys.stderr)
        return 2
    print(json.dumps(summary, indent=2))
    if summary.get("chains") and summary.get("failures/chain") == summary["chains"]:
        print(f"agentfly: every chain failed; first error: {summary.get('first_error')}", file=sys.stderr)
        return 1
    return 0


def _serve(argv: list[str]) -> int:
    from agentfly.run.serve import serve

    parser = argparse.ArgumentParser(
        prog="agentfly serve", usage=CONFIG_WORDS.format(command="serve"), epilog=CONFIG_EPILOG,
        description="the configured model, template and tool-call parser behind an OpenAI-compatible endpoint",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=8000, help="port (0: a free one, printed)")
    parser.add_argument("--api-key", help="the key clients must send (default: none)")
    parser.add_argument("--request-timeout", type=float, default=300.0,
                        help="seconds an engine call may take before the request is answered 504")
    parsed = _options_and_config(parser, argv)
    if parsed is None:
        return 2
    args, cfg = parsed
    return serve(cfg, host=args.host, port=args.port, api_key=args.api_key,
                 request_timeout=args.request_timeout)


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a record is emitted (not when it was made), so a
    process that calls :func:`main` more than once, redirecting stderr between calls, never writes
    to a stream that has been closed."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


USAGE = """usage: agentfly {fit,sft,validate,test,predict,rollout,serve} [--help] [KEY=VALUE | --KEY VALUE ...]

  fit        train (AgentFly's `python -m agentfly.cli train ...` is the same command)
  sft        supervised warm start on conversations or on rollout records (agentfly sft --help)
  validate   roll out the validation set with a checkpoint's actor (--ckpt_path, or the one
             trainer.resume_mode finds; else the base model)
  test       same as validate
  predict    same as validate (the trajectories are written to <run>/trajectories)
  rollout    run rollouts alone and write trajectories as JSONL
  serve      the model behind an OpenAI-compatible endpoint (agentfly serve --help)
"""


def main(argv: list[str] | None = None) -> int:
    # agentfly's own warnings; Lightning and Ray keep their own handlers (no double lines)
    log = logging.getLogger("agentfly")
    if not log.handlers:
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.WARNING)
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--version"]:
        print(f"agentfly {__version__}")
        return 0
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    command, rest = argv[0], argv[1:]
    if command == "rollout":
        return _rollout(rest)
    if command == "serve":
        return _serve(rest)
    if command == "sft":
        from agentfly.run.sft import main as sft_main

        return sft_main(rest)
    if command == "train":
        command = "fit"
    if command not in STAGES:
        print(f"agentfly: unknown command {command!r}\n{USAGE}", file=sys.stderr)
        return 2
    return _lightning(command, rest)

