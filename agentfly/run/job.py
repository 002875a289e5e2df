"""What every job plans the same way, ``agentfly fit`` and ``agentfly sft`` alike.

:class:`JobPlan` holds the fields both stages' plans have (the ranks, the run folder, the
module's and data module's arguments, callbacks, loggers, the Trainer's settings, seed, resume);
:class:`~agentfly.run.plan.RunPlan` and :class:`~agentfly.run.sft_plan.SFTPlan` add their own
beside them. :func:`job_fields` reads the ``trainer.*`` keys the two share, :func:`plan_loggers`
and :func:`plan_trainer` the loggers and Lightning's ``Trainer``; :mod:`agentfly.run.build`
builds every job from these.

Nothing here imports torch, Ray or Lightning.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentfly.config.keys import plain
from agentfly.rollout.rollout_plan import RolloutPlan
from agentfly.run.topology import Topology


@dataclass(kw_only=True)
class JobPlan:
    """Everything a job builds, as keyword arguments: the fields every stage has.

    Attributes:
        topology: the training ranks (and for ``fit``, the engines) on this machine.
        iterations: the run's iterations (RL iterations for ``fit``, optimizer steps for ``sft``).
        run_dir: the run directory (``trainer.default_local_dir`` as given).
        module: the LightningModule's keyword arguments (its settings groups).
        datamodule: the data module's keyword arguments (what only the stage builds aside).
        rollout: the rollout side (``sft`` lays its examples out with its agent and template).
        callbacks: ``(name, kwargs)`` of agentfly's callbacks, in order.
        user_callbacks: ``trainer.callbacks`` specs (class paths or ``{class_path, init_args}``).
        loggers: ``(kind, kwargs)`` per logger.
        trainer: ``lightning.pytorch.Trainer`` keyword arguments (callbacks and loggers aside;
            ``strategy="fsdp"`` is made a ``ModelParallelStrategy`` when built).
        seed: the global seed (``lightning.seed_everything``).
        num_threads: torch threads of each training process (None: torch's default).
        resume_mode: ``auto``, ``disable`` or ``resume_path``.
        resume_from_path: the checkpoint of ``resume_path``.
        resume_changed_config: resume across a change of the checkpoint's meaning
            (:func:`agentfly.run.resume.check_resume`).
        notes: what the run says once when it starts (the CPU fallback's reductions).
        trainer_keys: verl's ``trainer.*`` keys as ``AgentflyTrainer`` takes them
            (``logger``, ``callbacks`` and ``lightning`` aside: they are built or planned).
        val_before_train: validate once before the first update.
        test_freq: validate every N iterations; ``-1`` = never, nor at the end.
        val_limit: ``limit_val_batches`` of a validation asked for explicitly (before training,
            at the end, ``agentfly validate``): the user's ``--trainer.limit_val_batches``, else
            the whole set.
        console: ``trainer.logger`` names ``console`` (the run report is printed too).
        stage: the command (``fit``, ``sft``), recorded in and checked against the checkpoints.
    """

    topology: Topology
    iterations: int
    run_dir: str
    module: dict[str, Any]
    datamodule: dict[str, Any]
    rollout: RolloutPlan
    callbacks: list[tuple[str, dict[str, Any]]]
    user_callbacks: list[Any] = field(default_factory=list)
    loggers: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    trainer: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    num_threads: int | None = None
    resume_mode: str = "auto"
    resume_from_path: str | None = None
    resume_changed_config: bool = False
    notes: list[str] = field(default_factory=list)
    trainer_keys: dict[str, Any] = field(default_factory=dict)
    val_before_train: bool = True
    test_freq: int | None = -1
    val_limit: int | float = 1.0
    console: bool = False
    stage: str = "fit"


def job_fields(cfg: Any, topology: Topology, trainer_keys: set[str] | None = None) -> dict[str, Any]:
    """The :class:`JobPlan` fields every stage reads from the same keys: loggers, user callbacks,
    seed, resume, validation schedule, the ``trainer.*`` keys ``AgentflyTrainer`` takes
    (``trainer_keys``: the stage's own ``trainer.*`` names; None: all of them), and the notes
    the ranks' resolution made. ``num_threads``, the module, data module, callbacks, rollout and
    Trainer settings are the stage's own."""
    trainer = cfg.trainer
    run_dir = Path(str(trainer.default_local_dir))
    test_freq = trainer.test_freq
    return dict(
        run_dir=str(trainer.default_local_dir),
        user_callbacks=list(plain(trainer.callbacks) or []),
        loggers=plan_loggers(cfg, run_dir),
        seed=int(trainer.seed),
        resume_mode=str(trainer.resume_mode),
        resume_from_path=trainer.resume_from_path,
        resume_changed_config=bool(trainer.resume_changed_config),
        notes=list(topology.notes),
        trainer_keys={
            k: v for k, v in plain(trainer).items()
            if k not in ("logger", "callbacks", "lightning") and (trainer_keys is None or k in trainer_keys)
        },
        val_before_train=bool(trainer.val_before_train),
        test_freq=None if test_freq is None else int(test_freq),
        val_limit=(plain(trainer.lightning) or {}).get("limit_val_batches", 1.0),
        console="console" in (plain(trainer.logger) or []),
    )


def plan_loggers(cfg: Any, run_dir: Path) -> list[tuple[str, dict[str, Any]]]:
    """CSV always (``run_dir/metrics``); TensorBoard and wandb when ``trainer.logger`` names them.

    wandb honours its own environment (``WANDB_MODE=offline``, ``WANDB_DIR``; the run directory
    when ``WANDB_DIR`` is unset) and takes ``project_name``/``experiment_name``.
    """
    given = plain(cfg.trainer.logger) or []
    names = [n for n in given if isinstance(n, str)]
    # one version folder per launch (a resumed run adds version_1, ...; none is overwritten)
    out: list[tuple[str, dict[str, Any]]] = [("csv", {"save_dir": str(run_dir), "name": "metrics"})]
    if "tensorboard" in names:
        out.append(("tensorboard", {"save_dir": str(run_dir), "name": "tensorboard", "version": ""}))
    if "wandb" in names:
        out.append(("wandb", {
            "project": str(cfg.trainer.project_name), "name": str(cfg.trainer.experiment_name),
            "save_dir": os.environ.get("WANDB_DIR") or str(run_dir),
        }))
    out += [("class_path", spec) for spec in given if isinstance(spec, dict)]
    return out


def plan_trainer(cfg: Any, topology: Topology, needs_critic: bool) -> dict[str, Any]:
    """``lightning.pytorch.Trainer`` settings (callbacks and loggers are added when built)."""
    strategy = str(cfg.actor_rollout_ref.actor.strategy)
    if strategy == "auto" and topology.world_size > 1:
        strategy = "ddp"
    if strategy == "ddp" and needs_critic:
        # each backward reaches only the actor's or only the critic's parameters
        strategy = "ddp_find_unused_parameters_true"
    test_freq = cfg.trainer.test_freq
    settings: dict[str, Any] = dict(
        accelerator=topology.accelerator,
        devices=topology.devices,
        num_nodes=topology.nodes,
        strategy=strategy,
        max_epochs=-1,
        max_steps=-1,
        default_root_dir=str(cfg.trainer.default_local_dir),
        enable_checkpointing=False,  # IterationScheduleCallback checkpoints every save_freq iterations
        num_sanity_val_steps=0,
        check_val_every_n_epoch=None,
        val_check_interval=test_freq if test_freq and test_freq > 0 else None,
        limit_val_batches=1.0 if test_freq and test_freq > 0 else 0,
        log_every_n_steps=1,
        use_distributed_sampler=False,  # IterationBatches shards prompts by rank itself
        enable_progress_bar="console" in (plain(cfg.trainer.logger) or []),
    )
    settings.update(plain(cfg.trainer.lightning) or {})  # --trainer.<Trainer argument>
    return settings
