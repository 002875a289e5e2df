"""From a resolved config to a running Lightning fit: module, data module, callbacks, loggers.

What each component receives comes from one place, :func:`agentfly.run.plan.plan_run` (the config's
one reader); this module builds the objects. ``trainer.total_training_steps`` counts RL
iterations (rollout + update), however many optimizer steps each contains.

Devices (:mod:`agentfly.run.topology`): ``trainer.device=cuda`` runs ``n_gpus_per_node`` GPU
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

from agentfly.core.errors import InputError
from agentfly.rollout.rollout_plan import RolloutPlan
from agentfly.run.build import (
    build_trainer_of,
    class_spec,
    finish_wandb,
    is_rank_zero,
    open_run,
    resume_checkpoint,
    validate_all,
)
from agentfly.run.plan import RunPlan, plan_run
from agentfly.run.topology import Hardware

logger = logging.getLogger(__name__)


def _slurm_single_node_tasks() -> None:
    """`srun -n N` on one node sets SLURM_NTASKS but not SLURM_NTASKS_PER_NODE, which Lightning's
    SLURMEnvironment requires; on a single node the two are the same."""
    single_node = os.environ.get("SLURM_NNODES", "1") == "1"
    if "SLURM_NTASKS" in os.environ and "SLURM_NTASKS_PER_NODE" not in os.environ and single_node:
        os.environ["SLURM_NTASKS_PER_NODE"] = os.environ["SLURM_NTASKS"]


def make_plan(cfg: Any, hardware: Hardware | None = None, *, quiet: bool = False) -> RunPlan:
    """The run's plan on this machine (:func:`agentfly.run.plan.plan_run`); says its notes once.

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
    if is_rank_zero() and not quiet:
        for note in plan.notes:
            logger.warning("%s", note)
    return plan


def holds_a_fit(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds what a training run writes (checkpoints, the exported actor,
    the training rollouts' record), which a ``validate`` or ``test`` must leave alone."""
    return any((
        (run_dir / "checkpoints").is_dir(), (run_dir / "hf_actor").is_dir(),
        (run_dir / "trajectories" / "rollouts_rank0.jsonl").exists(),
    ))


def own_folder(cfg: Any, plan: RunPlan, stage: str) -> tuple[Any, RunPlan]:
    """``validate``/``test`` on a training run's folder write into ``<run>/<stage>/`` (its
    metrics, trajectories, config record), never over the fit's own files; elsewhere the folder
    is theirs. Returns the config and plan they run with."""
    from omegaconf import OmegaConf

    run_dir = Path(plan.run_dir)
    if stage not in ("validate", "test") or not holds_a_fit(run_dir):
        return cfg, plan
    own = run_dir / stage
    cfg = OmegaConf.merge(cfg, {"trainer": {"default_local_dir": str(own)}})
    if is_rank_zero():
        logger.warning("%s: %s holds a training run; this %s writes to %s", stage, run_dir, stage, own)
    return cfg, make_plan(cfg, quiet=True)


def build_module(plan: RunPlan, module_class: Any = None, init_args: dict[str, Any] | None = None) -> Any:
    """The LightningModule: ``module_class`` (``--model.class_path``, an ``AgentRLModule``
    subclass) with the plan's arguments and the subclass's own ``init_args``."""
    from agentfly.modules.rl_module import AgentRLModule

    return (module_class or AgentRLModule)(**plan.module, **(init_args or {}))


class EngineUnavailableError(InputError):
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
        reward=plan.rollout.reward, **plan.datamodule, **(init_args or {}),
    )


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
    return build_run(plan, ckpt, cfg, model=model, data=data, callbacks=callbacks, resumes=True)


def build_run(
    plan: RunPlan,
    ckpt: str | None,
    cfg: Any,
    *,
    model: tuple[Any, dict[str, Any]] | None = None,
    data: tuple[Any, dict[str, Any]] | None = None,
    callbacks: list[Any] = (),  # type: ignore[assignment]
    resumes: bool = False,
) -> tuple[Any, Any, Any, str | None]:
    """:func:`build_trainer` from the run's plan and the checkpoint :func:`resume_checkpoint`
    chose; every checkpoint the run writes records ``cfg``
    (:class:`~agentfly.callbacks.config_record.ConfigRecord`). ``resumes``: the checkpoint is a
    fit's to continue (its metrics continue the run's file), not one to validate."""
    from agentfly.run.resume import read_header

    check_engine(plan.engine_name, plan.rollout.num_engines)
    iteration = read_header(ckpt).iteration if resumes and ckpt is not None else None
    trainer = build_trainer_of(plan, cfg, callbacks, resume_iteration=iteration)
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
    ckpt = resume_checkpoint(cfg, plan, ckpt_path, stage)  # found in the folder named
    cfg, plan = own_folder(cfg, plan, stage)
    open_run(plan, stack, stage)
    trainer, module, datamodule, ckpt = build_run(
        plan, ckpt, cfg, model=class_spec(model, "model"), data=class_spec(data, "data"), callbacks=callbacks,
        resumes=stage == "fit",
    )
    stack.callback(finish_wandb, trainer)
    stack.callback(datamodule.close)
    trainer.started_at = started  # the report's "in all" time counts the start-up
    return plan, trainer, module, datamodule, ckpt


def run_stage(
    plan: RunPlan, stage: str, trainer: Any, module: Any, datamodule: Any, ckpt: str | None
) -> dict[str, float]:
    """Run ``stage`` and return the last logged metrics. ``fit`` validates (``val_before_train``),
    trains, validates again, then prints and writes the run's report (:mod:`agentfly.run.report`:
    before → after table, sample trajectories, ``training_curves.png``); ``validate``, ``test``
    and ``predict`` validate the checkpoint that :func:`resume_path` found (``--ckpt_path``
    first) or else the base model, writing the trajectories to ``<run>/trajectories``."""
    import time

    metrics = _run(plan, "validate" if stage in ("test", "predict") else stage, trainer, module, datamodule, ckpt)
    if stage == "fit" and trainer.is_global_zero:
        from agentfly.run.report import write_run_report

        try:
            write_run_report(
                Path(plan.run_dir), elapsed_s=time.perf_counter() - trainer.started_at, console=plan.console
            )
        except Exception as err:  # the training is done and saved; a report never fails it
            logger.warning("run report not written: %s", err)
    return metrics


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
        validate_all(trainer, module, datamodule, limit, ckpt)
        return {k: float(v) for k, v in trainer.callback_metrics.items()}
    if has_val and plan.val_before_train and ckpt is None:
        validate_all(trainer, module, datamodule, limit)
    trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt)
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    test_freq = plan.test_freq
    validated_at_end = test_freq and test_freq > 0 and module.iteration % test_freq == 0
    if has_val and test_freq != -1 and not validated_at_end:
        validate_all(trainer, module, datamodule, limit)
        metrics.update({k: float(v) for k, v in trainer.callback_metrics.items()})
    return metrics
