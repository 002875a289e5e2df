"""From a resolved config to a running Lightning fit: module, data module, callbacks, loggers.

What each component receives comes from one place, :func:`agentfly.plan.plan_run` (the config's
one reader); this module builds the objects. ``trainer.total_training_steps`` counts RL
iterations (rollout + update), however many optimizer steps each contains.

Devices (:mod:`agentfly.topology`): ``trainer.device=cuda`` runs ``n_gpus_per_node`` GPU
ranks per node; ``trainer.device=cpu`` runs ``n_gpus_per_node`` CPU ranks (DDP over gloo; the
explicit way to get several CPU processes); ``trainer.device=auto`` (the default) uses GPUs when
there are any and otherwise falls back to one CPU process per node (or the ranks SLURM launched)
and one engine, saying what it reduced once. Several ranks re-execute the command line
(Lightning's DDP launcher), so ``agentfly fit ...`` and ``python -m agentfly.cli fit ...`` both
work as they are.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path
from typing import Any

from agentfly.plan import RunPlan, plan_run
from agentfly.rollout.rollout_plan import RolloutPlan
from agentfly.topology import Hardware

logger = logging.getLogger(__name__)


def _is_rank_zero() -> bool:
    """Rank 0, or not distributed (from the launcher's environment, as Lightning reads it)."""
    for key in ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK"):
        if key in os.environ:
            return int(os.environ[key]) == 0
    return True


def _slurm_single_node_tasks() -> None:
    """`srun -n N` on one node sets SLURM_NTASKS but not SLURM_NTASKS_PER_NODE, which Lightning's
    SLURMEnvironment requires; on a single node the two are the same."""
    single_node = os.environ.get("SLURM_NNODES", "1") == "1"
    if "SLURM_NTASKS" in os.environ and "SLURM_NTASKS_PER_NODE" not in os.environ and single_node:
        os.environ["SLURM_NTASKS_PER_NODE"] = os.environ["SLURM_NTASKS"]


def make_plan(cfg: Any, hardware: Hardware | None = None) -> RunPlan:
    """The run's plan on this machine (:func:`agentfly.plan.plan_run`); says its notes once.

    A model path given as a Hub repo id is resolved here, once the plan's cheaper checks have
    passed: its local folder (downloaded, or cached) is what the run loads, and a repo that cannot
    be had stops the run here (:func:`agentfly.models.paths.resolve_model_paths`).
    """
    from agentfly.models.paths import resolve_model_paths

    _slurm_single_node_tasks()
    hardware = hardware or Hardware.detect()
    plan = plan_run(cfg, hardware)
    resolved = resolve_model_paths(cfg, needs_critic=plan.module["critic"] is not None)
    if resolved is not cfg:
        plan = plan_run(resolved, hardware)
    if _is_rank_zero():
        for note in plan.notes:
            logger.warning("%s", note)
    return plan


def _classes(spec: dict[str, Any] | None, key: str) -> tuple[Any, dict[str, Any]] | None:
    """``(class, init_args)`` of a ``{class_path, init_args}`` spec as LightningCLI parsed it."""
    import importlib

    if not spec:
        return None
    module_name, _, name = str(spec["class_path"]).rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"{key}: cannot import {spec['class_path']} ({exc})") from exc
    return cls, dict(spec.get("init_args") or {})


def instantiate(spec: Any, key: str) -> Any:
    """An object from ``{class_path, init_args}`` (a ``trainer.callbacks``/``logger`` entry)."""
    cls, init_args = _classes(spec, key)  # type: ignore[misc]
    try:
        return cls(**init_args)
    except TypeError as exc:
        raise ValueError(f"{key}: cannot build {spec['class_path']} ({exc})") from exc


def build_module(plan: RunPlan, module_class: Any = None, init_args: dict[str, Any] | None = None) -> Any:
    """The LightningModule: ``module_class`` (``--model.class_path``, an ``AgentRLModule``
    subclass) with the plan's arguments and the subclass's own ``init_args``."""
    from agentfly.modules.rl_module import AgentRLModule

    return (module_class or AgentRLModule)(**plan.module, **(init_args or {}))


class EngineUnavailableError(ValueError):
    """The configured rollout engine cannot start on this machine (the message names the fix)."""


def _engine_error(engine: str, err: Exception) -> EngineUnavailableError:
    return EngineUnavailableError(f"actor_rollout_ref.rollout.name={engine}: {err}")


def check_engine(engine: str, num_engines: int) -> None:
    """Fail before any model loads when ``engine`` is ``vllm`` and vLLM is missing.

    An in-process engine (``num_engines=0``) imports vLLM here anyway, so the import is tried in
    full; engines in Ray actors import it there, so this process only looks for the package.
    """
    if engine != "vllm":
        return
    import importlib.util

    from agentfly.rollout.engines.vllm import HINT, VLLMUnavailableError, import_vllm

    if num_engines != 0:
        if importlib.util.find_spec("vllm") is None:
            raise _engine_error(engine, VLLMUnavailableError(f"vLLM is not installed; {HINT}"))
        return
    try:
        import_vllm()
    except VLLMUnavailableError as err:
        raise _engine_error(engine, err) from err


def _session_factory(engine: str, rollout: RolloutPlan) -> Any:
    def build() -> Any:
        from agentfly.rollout.engines.vllm import VLLMUnavailableError
        from agentfly.rollout.runner import build_rollout

        try:
            return build_rollout(rollout)
        except VLLMUnavailableError as err:  # imported, but the engine did not start
            raise _engine_error(engine, err) from err

    return build


def build_datamodule(plan: RunPlan, datamodule_class: Any = None, init_args: dict[str, Any] | None = None) -> Any:
    from functools import partial

    from agentfly.rollout.datamodule import RolloutDataModule
    from agentfly.rollout.prompt_fit import renderer_from_plan

    # with the context known from the config, prompts are measured before any engine starts
    known = plan.rollout.loop["max_model_len"] is not None
    renderer = partial(renderer_from_plan, plan.rollout) if known else None
    return (datamodule_class or RolloutDataModule)(
        session_factory=_session_factory(plan.engine_name, plan.rollout), renderer_factory=renderer,
        **plan.datamodule, **(init_args or {}),
    )


def build_callbacks(plan: RunPlan) -> list[Any]:
    """agentfly's callbacks (:func:`agentfly.plan.plan_callbacks`), then ``trainer.callbacks``."""
    from agentfly.callbacks import AdvantageCallback, KLRewardCallback
    from agentfly.callbacks.iterations import IterationScheduleCallback
    from agentfly.callbacks.progress import iteration_progress_bar
    from agentfly.callbacks.trajectory_table import ValTrajectoryTable
    from agentfly.callbacks.weight_sync import WeightSyncCallback

    kinds: dict[str, Any] = {
        "AdvantageCallback": AdvantageCallback,
        "WeightSyncCallback": WeightSyncCallback,
        "IterationScheduleCallback": IterationScheduleCallback,
        "KLRewardCallback": KLRewardCallback,
        "ValTrajectoryTable": ValTrajectoryTable,
        "IterationProgressBar": iteration_progress_bar,
    }
    callbacks = [kinds[name](**kwargs) for name, kwargs in plan.callbacks]
    return callbacks + [instantiate(spec, "trainer.callbacks") for spec in plan.user_callbacks]


def build_loggers(plan: RunPlan) -> list[Any]:
    """CSV always, TensorBoard and wandb when ``trainer.logger`` names them
    (:func:`agentfly.plan.plan_loggers`), then the Lightning loggers it gives by class path;
    ``console`` is the progress bar (a callback)."""
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger, WandbLogger

    kinds = {"csv": CSVLogger, "tensorboard": TensorBoardLogger, "wandb": WandbLogger}
    named = [kinds[kind](**kwargs) for kind, kwargs in plan.loggers if kind in kinds]
    return named + [instantiate(spec, "trainer.logger") for kind, spec in plan.loggers if kind == "class_path"]


def resume_checkpoint(cfg: Any, plan: RunPlan, ckpt_path: str | None = None, stage: str = "fit") -> str | None:
    """The checkpoint of :func:`resume_path`; a ``fit`` checks it against ``cfg`` first
    (:func:`agentfly.resume.check_resume`: a finished run, a changed config), saying its notes.

    Raises:
        RunComplete: a fit whose checkpoint already holds every iteration.
        ConfigError: a fit whose config changes what the checkpoint means.
    """
    ckpt = resume_path(plan, ckpt_path)
    if ckpt is not None and stage == "fit":
        from agentfly.resume import check_resume

        notes = check_resume(cfg, plan, ckpt)
        if _is_rank_zero():
            for note in notes:
                logger.warning("%s", note)
    return ckpt


def resume_path(plan: RunPlan, ckpt_path: str | None = None) -> str | None:
    """The checkpoint a fit resumes from, or that ``validate``/``test`` score; None: the base model.

    ``ckpt_path`` (the command line's ``--ckpt_path``) names it outright; it must exist and load,
    and it contradicts ``resume_mode=disable`` or a different ``resume_from_path``. Otherwise
    ``resume_mode`` decides: ``resume_path`` takes ``resume_from_path`` (it must load too),
    ``auto`` the newest intact checkpoint of the run directory
    (:func:`agentfly.checkpoints.find_resume_checkpoint`): a damaged ``last.ckpt`` falls back to
    the newest intact ``iter_*.ckpt``, and with none intact the run starts fresh, saying so.

    Raises:
        FileNotFoundError: a named checkpoint does not exist.
        DamagedCheckpointError: a named checkpoint does not load.
    """
    from agentfly.checkpoints import check_named_checkpoint, find_resume_checkpoint

    mode, run_dir = plan.resume_mode, Path(plan.run_dir)
    if ckpt_path is not None:
        path = Path(ckpt_path)
        if not path.exists() and not path.is_symlink():
            raise FileNotFoundError(f"--ckpt_path {path} does not exist")
        named = plan.resume_from_path
        if mode == "disable" or (mode == "resume_path" and Path(str(named)).resolve() != path.resolve()):
            given = f"resume_from_path={named}" if mode == "resume_path" else "resume_mode=disable"
            raise ValueError(f"--ckpt_path {path} contradicts trainer.{given}: give one of them")
        return check_named_checkpoint(path, "--ckpt_path ")
    if mode == "disable":
        return None
    if mode == "resume_path":
        return check_named_checkpoint(str(plan.resume_from_path), "trainer.resume_from_path=")
    choice = find_resume_checkpoint(run_dir)
    said = choice.message()
    if said and _is_rank_zero():
        logger.warning("trainer.resume_mode=auto: %s", said)
    return choice.path


def build_trainer(
    cfg: Any,
    ckpt_path: str | None = None,
    hardware: Hardware | None = None,
    *,
    model: tuple[Any, dict[str, Any]] | None = None,
    data: tuple[Any, dict[str, Any]] | None = None,
    callbacks: list[Any] = (),  # type: ignore[assignment]
) -> tuple[Any, Any, Any, str | None]:
    """(Lightning Trainer, module, data module, checkpoint to resume from or to validate) of a fit.

    ``ckpt_path``: the checkpoint named on the command line (see :func:`resume_checkpoint`);
    ``hardware``: the machine (detected when None); ``model``/``data``: the classes chosen by
    ``--model.class_path``/``--data.class_path`` with their own further ``init_args``;
    ``callbacks``: further callback instances (LightningCLI's ``SaveConfigCallback``).
    """
    # what the machine cannot run fails in the plan, before any import
    plan = make_plan(cfg, hardware)
    ckpt = resume_checkpoint(cfg, plan, ckpt_path)  # a missing checkpoint fails before anything starts
    return build_run(plan, ckpt, cfg, model=model, data=data, callbacks=callbacks)


def build_run(
    plan: RunPlan,
    ckpt: str | None,
    cfg: Any,
    *,
    model: tuple[Any, dict[str, Any]] | None = None,
    data: tuple[Any, dict[str, Any]] | None = None,
    callbacks: list[Any] = (),  # type: ignore[assignment]
) -> tuple[Any, Any, Any, str | None]:
    """:func:`build_trainer` from the run's plan and the checkpoint :func:`resume_checkpoint`
    chose; every checkpoint the run writes records ``cfg``
    (:class:`~agentfly.callbacks.config_record.ConfigRecord`)."""
    check_engine(plan.engine_name, plan.rollout.num_engines)
    import lightning.pytorch as pl
    from lightning.fabric.plugins.environments import SLURMEnvironment

    if plan.num_threads:
        import torch

        torch.set_num_threads(int(plan.num_threads))
    pl.seed_everything(plan.seed, workers=True)
    run_dir = Path(plan.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    settings = dict(plan.trainer)
    if settings["strategy"] == "fsdp":
        from agentfly.modules.fsdp import fsdp_strategy

        # FSDP2; the sharding itself happens in configure_model
        settings["strategy"] = fsdp_strategy(plan.topology.world_size)
    from agentfly.callbacks.config_record import ConfigRecord
    from agentfly.modules.trainer import slurm_launched
    from agentfly.resume import config_record

    callbacks = [*build_callbacks(plan), ConfigRecord(config_record(cfg)), *callbacks]
    if slurm_launched():  # requeue at an iteration boundary, not inside the signal handler
        from agentfly.callbacks.requeue import SlurmRequeue

        settings["plugins"] = [SLURMEnvironment(auto_requeue=False)]
        callbacks.append(SlurmRequeue())
    from agentfly.modules.trainer import AgentflyTrainer

    trainer = AgentflyTrainer(**plan.trainer_keys, **settings, callbacks=callbacks, logger=build_loggers(plan))
    module = build_module(plan, *(model or ()))
    datamodule = build_datamodule(plan, *(data or ()))
    return trainer, module, datamodule, ckpt


def begin_run(
    cfg: Any,
    stack: contextlib.ExitStack,
    *,
    stage: str = "fit",
    ckpt_path: str | None = None,
    model: dict[str, Any] | None = None,
    data: dict[str, Any] | None = None,
    callbacks: list[Any] = (),  # type: ignore[assignment]
) -> tuple[RunPlan, Any, Any, Any, str | None]:
    """Plan and build the run of ``stage`` (:func:`make_plan`, :func:`resume_checkpoint`,
    :func:`build_run`) and register on ``stack`` what ends it, however it ends (an error,
    ``SystemExit`` from SIGTERM): the rollout closed (engines, tool workers), wandb's run finished,
    the empty folders this run made in the run directory removed, and on an error, the error
    written to ``<run>/error.txt`` when the run directory remains (:func:`_error_note`). Returns
    the plan, then what :func:`build_trainer` returns.

    Raises:
        RunComplete: a fit whose checkpoint already holds every iteration (nothing is built).
    """
    started = time.perf_counter()
    plan = make_plan(cfg)
    ckpt = resume_checkpoint(cfg, plan, ckpt_path, stage)
    run_dir = Path(plan.run_dir)
    existed = _folders(run_dir)
    if _is_rank_zero():
        (run_dir / ERROR_NOTE).unlink(missing_ok=True)  # an earlier launch's
        stack.push(_error_note(run_dir, stage))  # runs last: after the empty folders are removed
        stack.callback(_remove_empty_folders, run_dir, existed)
    trainer, module, datamodule, ckpt = build_run(
        plan, ckpt, cfg, model=_classes(model, "model"), data=_classes(data, "data"), callbacks=callbacks
    )
    stack.callback(_finish_wandb, trainer)
    stack.callback(datamodule.close)
    trainer.started_at = started  # the report's "in all" time counts the start-up
    return plan, trainer, module, datamodule, ckpt


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


def run_stage(
    plan: RunPlan, stage: str, trainer: Any, module: Any, datamodule: Any, ckpt: str | None
) -> dict[str, float]:
    """Run ``stage`` and return the last logged metrics. ``fit`` validates (``val_before_train``),
    trains, validates again, then prints and writes the run's report (:mod:`agentfly.report`:
    before → after table, sample trajectories, ``training_curves.png``); ``validate``, ``test``
    and ``predict`` validate the checkpoint that :func:`resume_path` found (``--ckpt_path``
    first) or else the base model, writing the trajectories to ``<run>/trajectories``."""
    import time

    metrics = _run(plan, "validate" if stage in ("test", "predict") else stage, trainer, module, datamodule, ckpt)
    if stage == "fit" and trainer.is_global_zero:
        from agentfly.report import write_run_report

        try:
            write_run_report(
                Path(plan.run_dir), elapsed_s=time.perf_counter() - trainer.started_at, console=plan.console
            )
        except Exception as err:  # the training is done and saved; a report never fails it
            logger.warning("run report not written: %s", err)
    return metrics


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


def _run(plan: RunPlan, stage: str, trainer: Any, module: Any, datamodule: Any, ckpt: str | None) -> dict[str, float]:
    has_val = bool(plan.datamodule["val_files"])
    limit = plan.val_limit
    if stage in ("validate", "test"):
        if ckpt is None and trainer.is_global_zero:
            why = "trainer.resume_mode=disable" if plan.resume_mode == "disable" else (
                f"trainer.resume_mode={plan.resume_mode} found none in {plan.run_dir}"
            )
            logger.warning(
                "%s: no checkpoint (no --ckpt_path, %s): validating the base model %s",
                stage, why, plan.module["model"].path,
            )
        _validate(trainer, module, datamodule, limit, ckpt)
        return {k: float(v) for k, v in trainer.callback_metrics.items()}
    if has_val and plan.val_before_train and ckpt is None:
        _validate(trainer, module, datamodule, limit)
    trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt)
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    test_freq = plan.test_freq
    validated_at_end = test_freq and test_freq > 0 and module.iteration % test_freq == 0
    if has_val and test_freq != -1 and not validated_at_end:
        _validate(trainer, module, datamodule, limit)
        metrics.update({k: float(v) for k, v in trainer.callback_metrics.items()})
    return metrics


def _validate(trainer: Any, module: Any, datamodule: Any, limit: Any, ckpt: str | None = None) -> None:
    """A validation asked for explicitly (before training, at the end, ``agentfly validate``) runs
    over the whole validation set even when ``test_freq`` turned periodic validation off."""
    periodic = trainer.limit_val_batches
    trainer.limit_val_batches = limit
    try:
        trainer.validate(module, datamodule=datamodule, ckpt_path=ckpt)
    finally:
        trainer.limit_val_batches = periodic


def _finish_wandb(trainer: Any) -> None:
    """End this fit's wandb run, so that a later fit in the same process starts its own."""
    from lightning.pytorch.loggers import WandbLogger

    if any(isinstance(lg, WandbLogger) for lg in trainer.loggers):
        import wandb

        if wandb.run is not None:
            wandb.finish()
