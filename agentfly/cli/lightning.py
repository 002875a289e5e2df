"""``agentfly fit|validate|test|predict``: :class:`AgentflyCLI`, a ``LightningCLI`` with verl's keys on top.

:mod:`agentfly.cli` imports this module on first use only: importing Lightning and the module is
slow, and ``agentfly --help``, ``--version``, ``rollout`` and ``sft`` need neither. See
:mod:`agentfly.cli` for the command line's groups and what the plan computes beyond them.
"""

from __future__ import annotations

import contextlib
import inspect
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from jsonargparse import ArgumentError
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback

from agentfly.config.keys import DATA_KEYS, GROUPS
from agentfly.config.load import compose, verl_tree
from agentfly.config.verl_args import parse_error
from agentfly.core.errors import ConfigError
from agentfly.modules.rl_module import AgentRLModule
from agentfly.modules.trainer import PLANNED_TRAINER_ARGS, AgentflyTrainer
from agentfly.rollout.datamodule import RolloutDataModule

# the module's arguments are all computed by the plan; the DataModule's beyond verl's data.*
MODULE_PLANNED = set(inspect.signature(AgentRLModule.__init__).parameters) - {"self"}
DATA_PLANNED = set(inspect.signature(RolloutDataModule.__init__).parameters) - {"self", *DATA_KEYS}


def default_data_parser(prog: str | None = None) -> LightningArgumentParser:
    """A parser of the default DataModule's arguments (verl's ``data.*``), which the fit parser's
    subclass-mode group shows only under ``--data.help``."""
    data = LightningArgumentParser(prog=prog)
    data.add_class_arguments(RolloutDataModule, "data", fail_untyped=False, skip=DATA_PLANNED)
    return data


class Parser(LightningArgumentParser):
    """Its ``--help`` lists the default DataModule's arguments (verl's ``data.*``) too, which
    a subclass-mode group shows only under ``--data.help``."""

    lists_data = False

    def format_help(self) -> str:
        text = super().format_help()
        if not self.lists_data:
            return text
        listing = default_data_parser(self.prog).format_help()
        group = listing[listing.rfind("\n\n", 0, listing.find("  --data.")) :].rstrip()
        return f"{text.rstrip()}\n\nThe default data module's arguments (--data.help RolloutDataModule):{group}\n"


class SaveRunConfig(SaveConfigCallback):
    """Writes the parsed config to ``<run directory>/config.yaml`` (``--config`` reads it back)."""

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if self.already_saved:
            return
        if trainer.is_global_zero:
            path = Path(trainer.default_root_dir) / self.config_filename
            path.parent.mkdir(parents=True, exist_ok=True)
            self.parser.save(self.config, path, skip_none=False, overwrite=True, multifile=False)
        self.already_saved = True


class AgentflyCLI(LightningCLI):
    """``agentfly fit|validate|test|predict`` (see :mod:`agentfly.cli`)."""

    def __init__(self, args: list[str], *, run: bool = True, parse_only: bool = False,
                 check_required: bool = True, explicit: set[str] | None = None,
                 stack: contextlib.ExitStack | None = None) -> None:
        self.parse_only, self.check_required, self.explicit = parse_only, check_required, explicit
        self.stack = stack or contextlib.ExitStack()
        self.metrics: dict[str, float] = {}
        super().__init__(
            AgentRLModule, RolloutDataModule, trainer_class=AgentflyTrainer,
            subclass_mode_model=True, subclass_mode_data=True,
            save_config_callback=SaveRunConfig,
            parser_class=Parser,
            parser_kwargs={"exit_on_error": False, "prog": "agentfly", "description": "Train LLM agents with RL."},
            auto_configure_optimizers=False, args=args, run=run,
        )

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        """Each stage's ``Trainer`` method arguments that are not options: all but ``ckpt_path``."""
        return {
            stage: set(inspect.signature(getattr(pl.Trainer, stage)).parameters) - {"self", "ckpt_path"}
            for stage in LightningCLI.subcommands()  # fit, validate, test, predict
        }

    def add_default_arguments_to_parser(self, parser: Any) -> None:
        """No ``--seed_everything``: ``trainer.seed`` seeds the run (the alias translates it)."""

    def add_core_arguments_to_parser(self, parser: Any) -> None:
        parser.add_class_arguments(AgentflyTrainer, "trainer", fail_untyped=False, instantiate=False,
                                   sub_configs=True, skip=set(PLANNED_TRAINER_ARGS))
        parser.add_subclass_arguments(AgentRLModule, "model", fail_untyped=False, required=False,
                                      skip=MODULE_PLANNED)
        parser.add_subclass_arguments(RolloutDataModule, "data", fail_untyped=False, required=False,
                                      skip=DATA_PLANNED)
        parser.lists_data = True
        parser.set_defaults({
            "model": {"class_path": f"{AgentRLModule.__module__}.AgentRLModule"},
            "data": {"class_path": f"{RolloutDataModule.__module__}.RolloutDataModule"},
        })

    def add_arguments_to_parser(self, parser: Any) -> None:
        for name, group in GROUPS.items():
            parser.add_class_arguments(group, name, fail_untyped=False)

    def parse_arguments(self, parser: Any, args: Any) -> None:
        try:
            self.config = parser.parse_args(args)
        except ArgumentError as exc:
            raise ConfigError(parse_error(exc)) from None

    def _parse_ckpt_path(self) -> None:
        """The module's arguments come from the plan, not from a checkpoint's hyperparameters
        (LightningCLI would read them back); ``--ckpt_path`` names the weights to load."""

    def _set_seed(self) -> None:
        """``trainer.seed`` seeds the run when it is built (:func:`agentfly.run.fit.build_trainer`)."""

    def instantiate_classes(self) -> None:
        ns = self.config[self.subcommand] if self.subcommand else self.config
        defaults = self._parser(self.subcommand).get_defaults()
        tree = verl_tree(ns, defaults.trainer.as_dict())
        self.run_config = compose(tree, check_required=self.check_required, explicit=self.explicit)
        if self.parse_only:
            return
        from agentfly.run.build import is_rank_zero
        from agentfly.run.fit import begin_run

        if self.run_config.trainer.print_config and is_rank_zero():
            from agentfly.config import config_to_yaml

            print(config_to_yaml(self.run_config))

        user = {g: ns[g].as_dict() for g in ("model", "data")}
        # verl's data.* reach the DataModule through the plan (with the rest it computes)
        user["data"]["init_args"] = {k: v for k, v in (user["data"].get("init_args") or {}).items()
                                     if k not in DATA_KEYS}
        self.plan, self.trainer, self.model, self.datamodule, self.ckpt = begin_run(
            self.run_config, self.stack, stage=self.subcommand, ckpt_path=ns.get("ckpt_path"),
            model=user["model"], data=user["data"],
            callbacks=[SaveRunConfig(self._parser(self.subcommand), ns, overwrite=True)],
        )

    def _prepare_subcommand_kwargs(self, subcommand: str) -> dict[str, Any]:
        return {"model": self.model, "datamodule": self.datamodule}

    def _stage(self, stage: str) -> None:
        from agentfly.run.fit import run_stage

        self.metrics = run_stage(self.plan, stage, self.trainer, self.model, self.datamodule, self.ckpt)

    def fit(self, model: Any, datamodule: Any) -> None:
        self._stage("fit")

    def validate(self, model: Any, datamodule: Any) -> None:
        self._stage("validate")

    def test(self, model: Any, datamodule: Any) -> None:
        self._stage("test")

    def predict(self, model: Any, datamodule: Any) -> None:
        self._stage("predict")
