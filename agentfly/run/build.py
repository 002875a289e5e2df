"""One build path for every job (``agentfly fit``, ``agentfly sft``): from a plan
(:class:`~agentfly.run.job.JobPlan`) to a Lightning ``Trainer`` and a run folder that ends cleanly.

:func:`open_run` registers what ends a run however it ends (the error written to
``<run>/error.txt``, the empty folders this run made removed); :func:`build_trainer_of` sets the
threads and seed, makes the FSDP strategy, agentfly's callbacks and the user's, the config record
in every checkpoint, SLURM's requeue and the loggers, and registers wandb's finish;
:func:`resume_checkpoint` chooses the checkpoint a run resumes from. Each stage builds only its
own module and data module (:mod:`agentfly.run.fit`, :mod:`agentfly.run.sft`).
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Any

from agentfly.core.errors import ConfigError
from agentfly.run.checkpoints import MissingCheckpointError
from agentfly.run.job import JobPlan

logger = logging.getLogger(__name__)


def is_rank_zero() -> bool:
    """Rank 0, or not distributed (from the launcher's environment, as Lightning reads it)."""
    for key in ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK"):
        if key in os.environ:
            return int(os.environ[key]) == 0
    return True


def class_spec(spec: dict[str, Any] | None, key: str) -> tuple[Any, dict[str, Any]] | None:
    """``(class, init_args)`` of a ``{class_path, init_args}`` spec as LightningCLI parsed it."""
    import importlib

    if not spec:
        return None
    module_name, _, name = str(spec["class_path"]).rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"{key}: cannot import {spec['class_path']} ({exc})") from exc
    return cls, dict(spec.get("init_args") or {})


def instantiate(spec: Any, key: str) -> Any:
    """An object from ``{class_path, init_args}`` (a ``trainer.callbacks``/``logger`` entry)."""
    cls, init_args = class_spec(spec, key)  # type: ignore[misc]
    try:
        return cls(**init_args)
    except TypeError as exc:
        raise ConfigError(f"{key}: cannot build {spec['class_path']} ({exc})") from exc


def open_run(plan: JobPlan, stack: contextlib.ExitStack, stage: str | None = None) -> None:
    """Register on ``stack`` what ends the run of ``plan`` however it ends (an error,
    ``SystemExit`` from SIGTERM), on rank 0: the empty folders this run made in the run directory
    removed, then on an error, the error written to ``<run>/error.txt`` when the run directory
    remains (:func:`_error_note`, naming ``stage``, by default the plan's); an earlier launch's note
    is removed now. On every rank, torch's thread count of the calling thread is set back to what
    it is now: the run sets its own (``trainer.num_threads``, the cores an overlapping rollout
    leaves the update), and a caller that goes on in this process (a notebook, a second
    :func:`agentfly.cli.main`) keeps its own."""
    import torch

    stack.callback(torch.set_num_threads, torch.get_num_threads())
    run_dir = Path(plan.run_dir)
    existed = _folders(run_dir)
    if is_rank_zero():
        (run_dir / ERROR_NOTE).unlink(missing_ok=True)  # an earlier launch's
        stack.push(_error_note(run_dir, stage or plan.stage))  # runs last: after the empty folders are removed
        stack.callback(_remove_empty_folders, run_dir, existed)


def build_trainer_of(
    plan: JobPlan, record: Any, callbacks: list[Any] = (), resume_iteration: int | None = None,  # type: ignore[assignment]
) -> Any:
    """The ``AgentflyTrainer`` of ``plan``: torch's threads and the seed set, the run directory
    made, agentfly's callbacks (:func:`build_callbacks`), then the config record ``record`` in every
    checkpoint (:class:`~agentfly.callbacks.config_record.ConfigRecord`), then ``callbacks``;
    ``strategy="fsdp"`` made Lightning's FSDP2 strategy; under SLURM, the requeue at an iteration
    boundary. ``resume_iteration``: the iteration of the checkpoint a fit resumes from (its
    metrics continue the run's file, :func:`build_loggers`)."""
    import lightning.pytorch as pl

    from agentfly.callbacks.config_record import ConfigRecord
    from agentfly.modules.trainer import AgentflyTrainer, slurm_launched
    from agentfly.run.resume import config_record

    if plan.num_threads:
        import torch

        torch.set_num_threads(int(plan.num_threads))
    pl.seed_everything(plan.seed, workers=True)
    Path(plan.run_dir).mkdir(parents=True, exist_ok=True)
    settings = dict(plan.trainer)
    if settings["strategy"] == "fsdp":
        from agentfly.modules.fsdp import fsdp_strategy

        # FSDP2; the sharding itself happens in configure_model
        settings["strategy"] = fsdp_strategy(plan.topology.world_size)
    callbacks = [*build_callbacks(plan), ConfigRecord(config_record(record)), *callbacks]
    if slurm_launched():  # requeue at an iteration boundary, not inside the signal handler
        from lightning.fabric.plugins.environments import SLURMEnvironment

        from agentfly.callbacks.requeue import SlurmRequeue

        settings["plugins"] = [SLURMEnvironment(auto_requeue=False)]
        callbacks.append(SlurmRequeue())
    return AgentflyTrainer(**plan.trainer_keys, **settings, callbacks=callbacks, logger=build_loggers(plan, resume_iteration))


def build_callbacks(plan: JobPlan) -> list[Any]:
    """agentfly's callbacks (:func:`agentfly.run.plan.plan_callbacks`), then ``trainer.callbacks``."""
    from agentfly.callbacks import AdvantageCallback, KLRewardCallback, TurnRewardCallback
    from agentfly.callbacks.interrupt import InterruptCheckpoint
    from agentfly.callbacks.iterations import IterationScheduleCallback
    from agentfly.callbacks.progress import iteration_progress_bar
    from agentfly.callbacks.trajectory_table import ValTrajectoryTable
    from agentfly.callbacks.weight_sync import WeightSyncCallback

    kinds: dict[str, Any] = {
        "AdvantageCallback": AdvantageCallback,
        "WeightSyncCallback": WeightSyncCallback,
        "IterationScheduleCallback": IterationScheduleCallback,
        "InterruptCheckpoint": InterruptCheckpoint,
        "KLRewardCallback": KLRewardCallback,
        "TurnRewardCallback": TurnRewardCallback,
        "ValTrajectoryTable": ValTrajectoryTable,
        "IterationProgressBar": iteration_progress_bar,
    }
    callbacks = [kinds[name](**kwargs) for name, kwargs in plan.callbacks]
    return callbacks + [instantiate(spec, "trainer.callbacks") for spec in plan.user_callbacks]


def build_loggers(plan: JobPlan, resume_iteration: int | None = None) -> list[Any]:
    """CSV always, TensorBoard and wandb when ``trainer.logger`` names them
    (:func:`agentfly.run.plan.plan_loggers`), then the Lightning loggers it gives by class path;
    ``console`` is the progress bar (a callback). The CSV of a fit resumed from a checkpoint of
    ``resume_iteration`` continues the run's file (:class:`~agentfly.run.metrics_file.RunCSVLogger`)."""
    from functools import partial

    from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger

    from agentfly.run.metrics_file import RunCSVLogger

    csv = partial(RunCSVLogger, resume_iteration=resume_iteration)
    kinds = {"csv": csv, "tensorboard": TensorBoardLogger, "wandb": WandbLogger}
    named = [kinds[kind](**kwargs) for kind, kwargs in plan.loggers if kind in kinds]
    return named + [instantiate(spec, "trainer.logger") for kind, spec in plan.loggers if kind == "class_path"]


def resume_checkpoint(cfg: Any, plan: JobPlan, ckpt_path: str | None = None, stage: str = "fit") -> str | None:
    """The checkpoint of :func:`resume_path`; a ``fit`` checks it against ``cfg`` first
    (:func:`agentfly.run.resume.check_resume`: a finished run, a changed config), saying its notes.

    Raises:
        RunComplete: a fit whose checkpoint already holds every iteration.
        ConfigError: a fit whose config changes what the checkpoint means.
    """
    ckpt = resume_path(plan, ckpt_path)
    if ckpt is None and plan.resume_mode == "auto":
        refuse_over_a_finished_run(Path(plan.run_dir), getattr(plan, "stage", "fit") if stage == "fit" else stage)
    if ckpt is not None and stage == "fit":
        from agentfly.run.resume import check_resume

        notes = check_resume(cfg, plan, ckpt)
        if is_rank_zero():
            for note in notes:
                logger.warning("%s", note)
    return ckpt


def refuse_over_a_finished_run(run_dir: Path, stage: str) -> None:
    """A run directory holding a trained actor (``hf_actor/``, written when a run ends) but no
    checkpoint: a ``fit`` or ``sft`` there would start at iteration 1 and overwrite it, a
    ``validate``/``test`` would score the base model. Both are refused, saying what to give
    instead (``trainer.resume_mode=disable`` does either on purpose).

    Raises:
        InputError: ``run_dir`` holds ``hf_actor/`` and no checkpoint was found.
    """
    from agentfly.core.errors import InputError

    if not (run_dir / "hf_actor").is_dir():
        return
    why = (f"trainer.default_local_dir={run_dir} holds a finished run's actor (hf_actor/) but no "
           "checkpoint (trainer.save_freq=-1 keeps none; save_freq=N keeps one every N iterations and at the end)")
    if stage in ("fit", "sft"):
        raise InputError(
            f"{why}: a new {stage} there would start at iteration 1 and overwrite it. Give another "
            f"trainer.default_local_dir, actor_rollout_ref.model.path={run_dir}/hf_actor to train on "
            "from its weights, or trainer.resume_mode=disable to train over it"
        )
    raise InputError(
        f"{why}: {stage} would score the base model, not the trained one. Give "
        f"actor_rollout_ref.model.path={run_dir}/hf_actor (and another trainer.default_local_dir) to "
        "score the trained actor, --ckpt_path for a checkpoint kept elsewhere, or "
        "trainer.resume_mode=disable to score the base model"
    )


def resume_path(plan: JobPlan, ckpt_path: str | None = None) -> str | None:
    """The checkpoint a fit resumes from, or that ``validate``/``test`` score; None: the base model.

    ``ckpt_path`` (the command line's ``--ckpt_path``) names it outright; it must exist and load,
    and it contradicts ``resume_mode=disable`` or a different ``resume_from_path``. Otherwise
    ``resume_mode`` decides: ``resume_path`` takes ``resume_from_path`` (it must load too),
    ``auto`` the newest intact checkpoint of the run directory
    (:func:`agentfly.run.checkpoints.find_resume_checkpoint`): a damaged ``last.ckpt`` falls back to
    the newest intact ``iter_*.ckpt``, and with none intact the run starts fresh, saying so.

    Raises:
        MissingCheckpointError: a named checkpoint does not exist.
        ConfigError: ``--ckpt_path`` contradicts ``trainer.resume_mode``.
        DamagedCheckpointError: a named checkpoint does not load.
    """
    from agentfly.run.checkpoints import check_named_checkpoint, find_resume_checkpoint

    mode, run_dir = plan.resume_mode, Path(plan.run_dir)
    if ckpt_path is not None:
        path = Path(ckpt_path)
        if not path.exists() and not path.is_symlink():
            raise MissingCheckpointError(f"--ckpt_path {path} does not exist")
        named = plan.resume_from_path
        if mode == "disable" or (mode == "resume_path" and Path(str(named)).resolve() != path.resolve()):
            given = f"resume_from_path={named}" if mode == "resume_path" else "resume_mode=disable"
            raise ConfigError(f"--ckpt_path {path} contradicts trainer.{given}: give one of them")
        return check_named_checkpoint(path, "--ckpt_path ")
    if mode == "disable":
        return None
    if mode == "resume_path":
        return check_named_checkpoint(str(plan.resume_from_path), "trainer.resume_from_path=")
    choice = find_resume_checkpoint(run_dir)
    said = choice.message()
    if said and is_rank_zero():
        logger.warning("trainer.resume_mode=auto: %s", said)
    return choice.path


ERROR_NOTE = "error.txt"  # in the run directory: why the latest launch stopped on an error


def _error_note(run_dir: Path, stage: str) -> Any:
    """An exit callback (``ExitStack.push``) that writes ``run_dir/error.txt`` when the run ends
    on an exception and its directory remains (one that held nothing is removed instead): the
    command, the error, and its traceback beside the launch's ``config.yaml``."""
    import sys
    import traceback
    from datetime import datetime

    def note(exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        if not isinstance(exc, Exception) or not run_dir.is_dir():
            return False  # no error (SIGTERM's SystemExit is a stop), or nothing left to explain
        lines = [
            f"agentfly {stage} stopped on an error at {datetime.now().isoformat(timespec='seconds')}",
            f"command: {' '.join(sys.argv)}",
            f"error: {type(exc).__name__}: {exc}",
            "the launch's config: config.yaml" if (run_dir / "config.yaml").is_file() else "no config.yaml was written",
        ]
        text = "\n".join(lines) + "\n\n" + "".join(traceback.format_exception(exc))
        with contextlib.suppress(OSError):  # the error itself is reported however this ends
            (run_dir / ERROR_NOTE).write_text(text, encoding="utf-8")
        return False

    return note


def _folders(root: Path) -> set[Path]:
    """Every folder under ``root`` (``root`` included) that exists now."""
    if not root.is_dir():
        return set()
    return {root, *(Path(d) / name for d, names, _ in os.walk(root) for name in names)}


def _remove_empty_folders(root: Path, existed: set[Path]) -> None:
    """Remove the folders under ``root`` (and ``root``) that are empty and not in ``existed``,
    deepest first (a folder emptied of empty folders goes too)."""
    if not root.is_dir():
        return
    for folder, _, _ in os.walk(root, topdown=False):
        if Path(folder) not in existed:
            with contextlib.suppress(OSError):  # not empty
                os.rmdir(folder)


def validate_all(trainer: Any, module: Any, datamodule: Any, limit: Any, ckpt: str | None = None) -> None:
    """A validation asked for explicitly (before training, at the end, ``agentfly validate``) runs
    over the whole validation set even when ``test_freq`` turned periodic validation off."""
    periodic = trainer.limit_val_batches
    trainer.limit_val_batches = limit
    try:
        trainer.validate(module, datamodule=datamodule, ckpt_path=ckpt)
    finally:
        trainer.limit_val_batches = periodic


def finish_wandb(trainer: Any) -> None:
    """End this fit's wandb run, so that a later fit in the same process starts its own."""
    from lightning.pytorch.loggers import WandbLogger

    if any(isinstance(lg, WandbLogger) for lg in trainer.loggers):
        import wandb

        if wandb.run is not None:
            wandb.finish()
