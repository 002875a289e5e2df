"""``agentfly sft``: from the composed config to a finished run folder.

The examples are made first, with the agent type, tools, template and tokenizer ``agentfly fit``
would roll out with (:func:`prepare`): a bad row stops the run there (``data.bad_rows=error``)
before any model loads. The run is then built by the path a fit is built by (:mod:`agentfly.run.build`):
the loggers, the callbacks (stop, checkpoint every ``trainer.save_freq`` steps, export the
policy and its tokenizer to ``<run>/hf_actor``, the progress bar, ``trainer.callbacks``), the
config record in every checkpoint, resume (``trainer.resume_mode``, ``--ckpt_path``; refused
across a change of meaning or from a fit's checkpoint), SLURM's requeue, the error note and the
run folder's clean-up. The run folder holds ``config.yaml`` (``agentfly sft --config`` reads it
back), ``metrics/``, ``checkpoints/``, ``hf_actor/`` (a vision-language model's with its image
processor, which ``agentfly fit`` needs) and, when rows were skipped, ``bad_rows.txt``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from agentfly.run.topology import Hardware

logger = logging.getLogger(__name__)

USAGE = """usage: agentfly sft [--config FILE] [KEY=VALUE | --KEY VALUE ...] [--ckpt_path CKPT] [--print_config]

Supervised fine-tuning of an agent's policy: on chat conversations (data.format=messages),
laid out with the agent type and template agentfly fit rolls out with, or on agentfly's rollout
records (data.format=rollouts), token for token, filtered by reward (data.min_reward).
The loss is on the assistant's tokens only. With no --config and no data.train_files it runs
conf/examples/sft_demo.yaml.
"""


def prepare(cfg: Any, hardware: Hardware | None = None) -> tuple[Any, Any, Any, Any, Any]:
    """``(cfg, plan, data, tokenizer, vision)``: the config with a Hub model id resolved to its
    folder, the run's plan, the examples of both splits, the model's tokenizer and, for a
    vision-language model, its image processor (:func:`vision_of`; else None).

    Raises:
        ConfigError: a model path that cannot be had, what the machine cannot run, batches that
            do not split.
        DataError: a file that cannot be read; a bad row with ``data.bad_rows=error``; no
            training example left.
    """
    from agentfly.models.paths import resolve_model_paths
    from agentfly.rollout.prompt_fit import renderer_from_plan
    from agentfly.run.plan import plan_rollout
    from agentfly.run.sft_plan import example_settings, plan_sft, sft_topology
    from agentfly.sft.conversations import ConversationRenderer
    from agentfly.sft.examples import ExampleMaker, load_sft_data

    hw = hardware or Hardware.detect()
    plan_rollout(cfg, sft_topology(cfg, hw))  # the cheap checks first, then a Hub id is resolved
    cfg = resolve_model_paths(cfg, needs_critic=False)
    rollout = plan_rollout(cfg, sft_topology(cfg, hw))
    parts = renderer_from_plan(rollout)
    renderer = ConversationRenderer(parts.agent, parts.template, parts.tokenizer, vision_of(rollout, parts.tokenizer))
    make = ExampleMaker(renderer, **example_settings(cfg))
    data = load_sft_data(
        [str(f) for f in cfg.data.train_files], [str(f) for f in cfg.data.val_files], make,
        bad_rows=str(cfg.data.bad_rows),
    )
    return cfg, plan_sft(cfg, len(data.train.kept), hw), data, parts.tokenizer, renderer.vision


def vision_of(rollout: Any, tokenizer: Any) -> Any:
    """The model's image processor (:class:`~agentfly.rollout.vision.VisionProcessor`) when the
    policy is a vision-language model, as the rollout builds it; None for a text model."""
    from agentfly.models.loading import is_vision_model
    from agentfly.rollout.vision import VisionProcessor

    path = rollout.engine_kwargs["model"]
    if not is_vision_model(path, bool(rollout.engine_kwargs.get("trust_remote_code", False))):
        return None
    return VisionProcessor.from_pretrained(path, tokenizer)


def _say_data(run_dir: Path, data: Any) -> None:
    """Name the skipped rows (a warning and ``bad_rows.txt``) and the reward filter's count."""
    from agentfly.sft.examples import listing

    if data.bad:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "bad_rows.txt").write_text("\n".join(data.bad) + "\n", encoding="utf-8")
        logger.warning(
            "data.bad_rows=skip: %d row(s) left out (all in %s):\n%s",
            len(data.bad), run_dir / "bad_rows.txt", listing(data.bad),
        )
    for split, ex in (("train", data.train), ("val", data.val)):
        if ex.filtered:
            logger.warning(
                "data.min_reward: %d %s record(s) below the bound left out, %d kept", ex.filtered, split, len(ex.kept)
            )


def build(
    cfg: Any, stack: contextlib.ExitStack, *, ckpt_path: str | None = None, hardware: Hardware | None = None,
) -> tuple[Any, Any, Any, Any, str | None]:
    """Plan and build the run; registers on ``stack`` what ends it however it ends (wandb's run
    finished, the empty folders this run made removed, ``error.txt`` on an error). Returns
    ``(plan, trainer, module, datamodule, checkpoint to resume from)``.

    Raises:
        RunComplete: the checkpoint already holds every step (nothing is built).
    """
    from omegaconf import OmegaConf

    from agentfly.config.sft import sft_view, view_yaml
    from agentfly.modules.sft_module import AgentSFTModule
    from agentfly.run.build import (
        build_trainer_of,
        finish_wandb,
        is_rank_zero,
        open_run,
        resume_checkpoint,
    )
    from agentfly.sft.datamodule import SFTDataModule

    started = time.perf_counter()
    cfg, plan, data, tokenizer, vision = prepare(cfg, hardware)
    own = OmegaConf.create(sft_view(cfg))  # what a resume compares: agentfly sft's keys
    ckpt = resume_checkpoint(own, plan, ckpt_path)
    open_run(plan, stack)
    if is_rank_zero():
        for note in plan.notes:
            logger.warning("%s", note)
        _say_data(Path(plan.run_dir), data)
    if is_rank_zero():  # before the trainer: error.txt points at it
        Path(plan.run_dir).mkdir(parents=True, exist_ok=True)
        (Path(plan.run_dir) / "config.yaml").write_text(view_yaml(cfg), encoding="utf-8")
    trainer = build_trainer_of(plan, own)
    stack.callback(finish_wandb, trainer)
    trainer.started_at = started
    module = AgentSFTModule(**plan.module)
    datamodule = SFTDataModule(
        data.train.kept, data.val.kept, tokenizer, counts=data.counts, vision=vision, **plan.datamodule
    )
    return plan, trainer, module, datamodule, ckpt


def run(plan: Any, trainer: Any, module: Any, datamodule: Any, ckpt: str | None) -> dict[str, float]:
    """Validate before training (``trainer.val_before_train``, on a fresh run), train, validate
    at the end unless the last step was just validated (or ``trainer.test_freq=-1``); returns the
    last logged metrics."""
    from agentfly.run.build import validate_all

    has_val = bool(datamodule.val)
    if has_val and plan.val_before_train and ckpt is None:
        validate_all(trainer, module, datamodule, plan.val_limit)
    trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt)
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    if has_val and plan.test_freq != -1 and module.validated_at != module.iteration:
        validate_all(trainer, module, datamodule, plan.val_limit)
        metrics.update({k: float(v) for k, v in trainer.callback_metrics.items()})
    return metrics


def main(argv: list[str]) -> int:
    """``agentfly sft`` (see :data:`USAGE`); returns the exit status."""
    from agentfly.config.sft import parse_sft_config, sft_parser, view_yaml
    from agentfly.core.errors import ConfigError, InputError

    flags = argparse.ArgumentParser(prog="agentfly sft", add_help=False)
    flags.add_argument("-h", "--help", action="store_true")
    flags.add_argument("--help-all", action="store_true")
    flags.add_argument("--print_config", action="store_true")
    flags.add_argument("--ckpt_path")
    args, words = flags.parse_known_args(argv)
    if args.help:
        from agentfly.config.help_page import sft_help

        print(sft_help(USAGE, sft_parser()[0]))
        return 0
    if args.help_all:
        print(USAGE + "\n" + sft_parser()[0].format_help())
        return 0
    try:
        cfg = parse_sft_config(words, default_task=True)
    except ConfigError as e:
        print(f"agentfly: config error: {e}", file=sys.stderr)
        return 2
    if args.print_config or cfg.trainer.print_config:
        print(view_yaml(cfg))
        if args.print_config:
            return 0
    from agentfly.core.shutdown import sigterm_exits
    from agentfly.run.resume import RunComplete

    try:
        with sigterm_exits(), contextlib.ExitStack() as stack:
            plan, trainer, module, datamodule, ckpt = build(cfg, stack, ckpt_path=args.ckpt_path)
            metrics = run(plan, trainer, module, datamodule, ckpt)
    except RunComplete as e:
        print(f"agentfly: {e}", file=sys.stderr)
        return 0
    except ConfigError as e:
        print(f"agentfly: config error: {e}", file=sys.stderr)
        return 2
    except InputError as e:  # a bad data file, checkpoint or plugin; anything else is a bug: its traceback
        print(f"agentfly: {e}", file=sys.stderr)
        return 2
    shown = {k: round(v, 4) for k, v in sorted(metrics.items()) if k in ("train/loss", "val/loss")}
    print(json.dumps(shown, indent=2))
    return 0
