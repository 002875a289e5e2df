"""From a resolved config to a running Lightning fit: module, data module, callbacks, loggers.

This is the one place that reads the config tree; every component below takes flat keyword
arguments. ``trainer.total_training_steps`` counts RL iterations (rollout + update), however many
optimizer steps each contains.

Devices: ``trainer.device=cuda`` runs ``n_gpus_per_node`` GPU ranks per node; ``trainer.device=cpu``
runs ``n_gpus_per_node`` CPU ranks (DDP over gloo; the explicit way to get several CPU processes);
``trainer.device=auto`` (the default) uses GPUs when there are any and otherwise runs one CPU
process per node (or the ranks SLURM launched), saying "no GPU: running on the CPU" once. Several
ranks re-execute the command line (Lightning's DDP launcher), so ``agentfly fit ...`` and
``python -m agentfly.cli fit ...`` both work as they are.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


def _is_rank_zero() -> bool:
    """Rank 0, or not distributed (from the launcher's environment: RANK, SLURM_PROCID...)."""
    from lightning.fabric.utilities.rank_zero import rank_zero_only

    return getattr(rank_zero_only, "rank", 0) == 0


def _world(cfg: Any) -> tuple[str, int, int]:
    """(accelerator, devices, num_nodes) from ``trainer.device`` and ``trainer.n_gpus_per_node``.

    - ``device=cuda``: GPUs, ``n_gpus_per_node`` per node; an error when none is visible.
    - ``device=cpu``: ``n_gpus_per_node`` CPU processes per node (DDP over gloo when more than
      one), GPUs or not: the explicit way to run several CPU ranks on one machine.
    - ``device=auto``: GPUs when visible; otherwise one CPU process per node (or the ranks that
      SLURM launched), said once: "no GPU: running on the CPU".
    """
    import torch

    # `srun -n N` on one node sets SLURM_NTASKS but not SLURM_NTASKS_PER_NODE, which Lightning's
    # SLURMEnvironment requires; on a single node the two are the same.
    single_node = os.environ.get("SLURM_NNODES", "1") == "1"
    if "SLURM_NTASKS" in os.environ and "SLURM_NTASKS_PER_NODE" not in os.environ and single_node:
        os.environ["SLURM_NTASKS_PER_NODE"] = os.environ["SLURM_NTASKS"]
    requested = max(1, int(cfg.trainer.n_gpus_per_node))
    nodes = int(cfg.trainer.nnodes)
    device = "cuda" if cfg.trainer.device == "gpu" else cfg.trainer.device
    if device == "cpu":
        return "cpu", requested, nodes
    if torch.cuda.is_available():
        return "gpu", requested, nodes
    if device == "cuda":
        raise ValueError("trainer.device=cuda but no CUDA device is visible")
    devices = requested if "SLURM_NTASKS" in os.environ else 1
    if _is_rank_zero():
        logger.warning(
            "no GPU: running on the CPU (trainer.n_gpus_per_node=%d -> %d CPU process%s per node; "
            "trainer.device=cpu runs n_gpus_per_node CPU processes)",
            requested, devices, "" if devices == 1 else "es",
        )
    return "cpu", devices, nodes


def build_module(cfg: Any, world_size: int, total: int) -> Any:
    from agentfly.estimators import get_estimator
    from agentfly.modules.rl_module import AgentRLModule

    actor = cfg.actor_rollout_ref.actor
    fsdp = actor.fsdp_config  # the actor's settings shard the reference and the critic too
    needs_critic = get_estimator(cfg.algorithm.adv_estimator).needs_critic
    use_kl_in_reward = bool(cfg.algorithm.use_kl_in_reward)
    per_rank_batch = cfg.data.train_batch_size * cfg.agent.run_config.num_chains // world_size
    mini = max(1, actor.ppo_mini_batch_size // world_size)
    steps_per_iter = actor.ppo_epochs * max(1, per_rank_batch // mini)
    warmup = actor.optim.lr_warmup_steps
    if warmup is None or warmup < 0:
        warmup = int(actor.optim.lr_warmup_steps_ratio * total * steps_per_iter)
    return AgentRLModule(
        str(cfg.actor_rollout_ref.model.path),
        critic_path=str(cfg.critic.model.path) if needs_critic else None,
        use_reference=bool(actor.use_kl_loss or use_kl_in_reward),
        use_kl_in_reward=use_kl_in_reward,
        kl_penalty=cfg.algorithm.kl_penalty,
        lr=actor.optim.lr,
        betas=tuple(actor.optim.betas),
        weight_decay=actor.optim.weight_decay,
        lr_warmup_steps=warmup,
        critic_lr=cfg.critic.optim.lr,
        grad_clip=actor.grad_clip,
        ppo_epochs=actor.ppo_epochs,
        ppo_mini_batch_size=mini,
        micro_batch_size=actor.ppo_micro_batch_size_per_gpu,
        clip_ratio_low=actor.clip_ratio_low,
        clip_ratio_high=actor.clip_ratio_high,
        clip_ratio_c=actor.clip_ratio_c,
        loss_agg_mode=actor.loss_agg_mode,
        entropy_coeff=actor.entropy_coeff,
        use_kl_loss=actor.use_kl_loss,
        kl_loss_coef=actor.kl_loss_coef,
        kl_loss_type=actor.kl_loss_type,
        cliprange_value=cfg.critic.cliprange_value,
        critic_warmup=cfg.trainer.critic_warmup,
        temperature=cfg.agent.run_config.generation_config.temperature or 1.0,
        gradient_checkpointing=cfg.actor_rollout_ref.model.enable_gradient_checkpointing,
        fsdp_offload=bool(fsdp.param_offload or fsdp.optimizer_offload),
        fsdp_reshard_after_forward=bool(fsdp.reshard_after_forward),
        fsdp_size=int(fsdp.fsdp_size),
        dtype="float32",
        total_training_steps=total,
    )


def _total_iterations(cfg: Any) -> int:
    if cfg.trainer.total_training_steps:
        return int(cfg.trainer.total_training_steps)
    from agentfly.rollout.data import load_rows

    rows = sum(len(load_rows(f, cfg.data.prompt_key)) for f in cfg.data.train_files)
    return max(1, rows // cfg.data.train_batch_size) * int(cfg.trainer.total_epochs)


class EngineUnavailableError(ValueError):
    """The configured rollout engine cannot start on this machine (the message names the fix)."""


def _engine_error(cfg: Any, err: Exception) -> EngineUnavailableError:
    name = cfg.actor_rollout_ref.rollout.name
    return EngineUnavailableError(f"actor_rollout_ref.rollout.name={name}: {err}")


def check_engine(cfg: Any) -> None:
    """Fail before any model loads when ``rollout.name=vllm`` and vLLM is missing.

    An in-process engine (``num_engines=0``) imports vLLM here anyway, so the import is tried in
    full; engines in Ray actors import it there, so this process only looks for the package.
    """
    rollout = cfg.actor_rollout_ref.rollout
    if rollout.name != "vllm":
        return
    import importlib.util

    from agentfly.rollout.engines.vllm import HINT, VLLMUnavailableError, import_vllm

    if rollout.num_engines != 0:
        if importlib.util.find_spec("vllm") is None:
            raise _engine_error(cfg, VLLMUnavailableError(f"vLLM is not installed; {HINT}"))
        return
    try:
        import_vllm()
    except VLLMUnavailableError as err:
        raise _engine_error(cfg, err) from err


def _session_factory(cfg: Any) -> Any:
    def build() -> Any:
        from agentfly.rollout.engines.vllm import VLLMUnavailableError
        from agentfly.rollout.runner import build_rollout

        try:
            return build_rollout(cfg)
        except VLLMUnavailableError as err:  # imported, but the engine did not start
            raise _engine_error(cfg, err) from err

    return build


def build_datamodule(cfg: Any, world_size: int, run_dir: Path) -> Any:
    from agentfly.estimators import get_estimator
    from agentfly.rollout.datamodule import RolloutDataModule

    if cfg.data.train_batch_size % world_size:
        raise ValueError(f"data.train_batch_size={cfg.data.train_batch_size} does not split over {world_size} ranks")
    val = cfg.actor_rollout_ref.rollout.val_kwargs
    return RolloutDataModule(
        _session_factory(cfg),
        train_files=list(cfg.data.train_files),
        val_files=list(cfg.data.val_files),
        train_batch_size=cfg.data.train_batch_size // world_size,
        val_batch_size=cfg.data.val_batch_size,
        prompt_key=cfg.data.prompt_key,
        shuffle=cfg.data.shuffle,
        seed=cfg.data.seed,
        # do_sample with temperature 0 samples at the training temperature
        val_temperature=(val.temperature or cfg.agent.run_config.generation_config.temperature) if val.do_sample else None,
        val_top_p=val.top_p,
        val_top_k=val.top_k,
        val_n=val.n,
        val_also_greedy=bool(val.also_greedy),
        greedy_baselines=get_estimator(cfg.algorithm.adv_estimator).needs_baselines,
        trajectory_dir=str(run_dir / "trajectories"),
    )


def build_callbacks(cfg: Any, run_dir: Path, total: int) -> list[Any]:
    from agentfly.callbacks import AdvantageCallback, KLRewardCallback
    from agentfly.callbacks.iterations import IterationCallback
    from agentfly.callbacks.weight_sync import WeightSyncCallback

    alg = cfg.algorithm
    callbacks: list[Any] = [
        AdvantageCallback(alg.adv_estimator, alg.gamma, alg.lam, alg.norm_adv_by_std_in_grpo),
        WeightSyncCallback(),
        IterationCallback(
            total_iterations=total,
            checkpoint_dir=run_dir / "checkpoints",
            save_freq=cfg.trainer.save_freq or -1,
            hf_dir=run_dir / "hf_actor",
        ),
    ]
    if alg.use_kl_in_reward:
        k = alg.kl_ctrl
        callbacks.append(KLRewardCallback(alg.kl_penalty, k.type, k.kl_coef, k.target_kl, k.horizon))
    names = [str(n) for n in cfg.trainer.logger]
    if "wandb" in names:
        from agentfly.callbacks.trajectory_table import ValTrajectoryTable

        callbacks.append(ValTrajectoryTable())
    if "console" in names:
        from agentfly.callbacks.progress import iteration_progress_bar

        callbacks.append(iteration_progress_bar(total))
    return callbacks


def build_loggers(cfg: Any, run_dir: Path) -> list[Any]:
    """CSV always (``run_dir/metrics``); TensorBoard and wandb when ``trainer.logger`` names them.

    wandb honours its own environment (``WANDB_MODE=offline``, ``WANDB_DIR``; the run directory
    when ``WANDB_DIR`` is unset) and takes ``project_name``/``experiment_name``.
    """
    import importlib.util

    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger, WandbLogger

    names = [str(n) for n in cfg.trainer.logger]
    # one version folder per launch (a resumed run adds version_1, ...; none is overwritten)
    loggers: list[Any] = [CSVLogger(str(run_dir), name="metrics")]
    if "tensorboard" in names:
        if not any(importlib.util.find_spec(m) for m in ("tensorboard", "tensorboardX")):
            raise ValueError(
                "trainer.logger names 'tensorboard' but neither tensorboard nor tensorboardX is "
                "installed (pip install tensorboard), or drop it: metrics are written as CSV anyway"
            )
        loggers.append(TensorBoardLogger(str(run_dir), name="tensorboard", version=""))
    if "wandb" in names:
        save_dir = os.environ.get("WANDB_DIR") or str(run_dir)
        loggers.append(
            WandbLogger(project=cfg.trainer.project_name, name=cfg.trainer.experiment_name, save_dir=save_dir)
        )
    return loggers


def resume_path(cfg: Any, run_dir: Path) -> str | None:
    mode = cfg.trainer.resume_mode
    if mode == "disable":
        return None
    if mode == "resume_path":
        path = Path(str(cfg.trainer.resume_from_path))
        if not path.exists():
            raise FileNotFoundError(f"trainer.resume_from_path={path} does not exist")
        return str(path)
    candidates = []
    last = run_dir / "checkpoints" / "last.ckpt"
    if last.exists():  # written to a temporary name and renamed: never half-written
        candidates.append(last)
    else:
        candidates += sorted((run_dir / "checkpoints").glob("iter_*.ckpt"))[-1:]
    # Lightning's SLURM auto-requeue (SIGUSR1) saves hpc_ckpt_N.ckpt into the run directory
    candidates += sorted(run_dir.glob("hpc_ckpt_*.ckpt"), key=lambda p: int(p.stem.rsplit("_", 1)[1]))[-1:]
    if not candidates:
        return None
    return str(max(candidates, key=lambda p: p.stat().st_mtime))


def build_trainer(cfg: Any) -> tuple[Any, Any, Any, str | None]:
    """(Lightning Trainer, module, data module, checkpoint to resume from)."""
    import lightning.pytorch as pl
    from lightning.fabric.plugins.environments import SLURMEnvironment
    from omegaconf import OmegaConf

    from agentfly.config.lightning_args import build_callbacks as build_lightning_callbacks
    from agentfly.estimators import get_estimator

    check_engine(cfg)
    needs_critic = get_estimator(cfg.algorithm.adv_estimator).needs_critic
    if cfg.trainer.num_threads:
        import torch

        torch.set_num_threads(int(cfg.trainer.num_threads))
    pl.seed_everything(int(cfg.trainer.seed), workers=True)
    accelerator, devices, nodes = _world(cfg)
    world = devices * nodes
    run_dir = Path(str(cfg.trainer.default_local_dir))
    run_dir.mkdir(parents=True, exist_ok=True)
    strategy: Any = cfg.actor_rollout_ref.actor.strategy
    if strategy == "fsdp":
        from agentfly.modules.fsdp import fsdp_strategy

        strategy = fsdp_strategy(world)  # FSDP2; the sharding itself happens in configure_model
    if strategy == "auto" and world > 1:
        strategy = "ddp"
    if strategy == "ddp" and needs_critic:
        # each backward reaches only the actor's or only the critic's parameters
        strategy = "ddp_find_unused_parameters_true"
    test_freq = cfg.trainer.test_freq
    total = _total_iterations(cfg)  # reads the data files when counted in epochs: once, here
    callbacks = build_callbacks(cfg, run_dir, total)
    callbacks += build_lightning_callbacks(OmegaConf.to_container(cfg.trainer.callbacks, resolve=True))
    settings: dict[str, Any] = dict(
        accelerator=accelerator,
        devices=devices,
        num_nodes=nodes,
        strategy=strategy,
        max_epochs=-1,
        max_steps=-1,
        logger=build_loggers(cfg, run_dir),
        callbacks=callbacks,
        default_root_dir=str(run_dir),
        enable_checkpointing=False,  # IterationCallback checkpoints every save_freq iterations
        num_sanity_val_steps=0,
        check_val_every_n_epoch=None,
        val_check_interval=test_freq if test_freq and test_freq > 0 else None,
        limit_val_batches=1.0 if test_freq and test_freq > 0 else 0,
        log_every_n_steps=1,
        use_distributed_sampler=False,  # IterationBatches shards prompts by rank itself
        enable_progress_bar="console" in [str(n) for n in cfg.trainer.logger],
    )
    if SLURMEnvironment.detect():  # requeue at an iteration boundary, not inside the signal handler
        from agentfly.callbacks.requeue import SlurmRequeue

        settings["plugins"] = [SLURMEnvironment(auto_requeue=False)]
        callbacks.append(SlurmRequeue())
    settings.update(OmegaConf.to_container(cfg.trainer.lightning, resolve=True))  # --trainer.<Trainer argument>
    trainer = pl.Trainer(**settings)
    module = build_module(cfg, world, total)
    datamodule = build_datamodule(cfg, world, run_dir)
    return trainer, module, datamodule, resume_path(cfg, run_dir)


def run_fit(cfg: Any, stage: str = "fit") -> dict[str, float]:
    """Validate (``val_before_train``), train, validate again, then print and write the run's report
    (:mod:`agentfly.report`: before → after table, sample trajectories, ``training_curves.png``);
    returns the last logged metrics."""
    import time

    start = time.perf_counter()
    trainer, module, datamodule, ckpt = build_trainer(cfg)
    try:
        metrics = _run(cfg, stage, trainer, module, datamodule, ckpt)
    finally:
        datamodule.close()
        _finish_wandb(trainer)
    if stage not in ("validate", "test") and trainer.is_global_zero:
        from agentfly.report import write_run_report

        try:
            write_run_report(
                Path(str(cfg.trainer.default_local_dir)), elapsed_s=time.perf_counter() - start,
                console="console" in [str(n) for n in cfg.trainer.logger],
            )
        except Exception as err:  # the training is done and saved; a report never fails it
            logger.warning("run report not written: %s", err)
    return metrics


def _run(cfg: Any, stage: str, trainer: Any, module: Any, datamodule: Any, ckpt: str | None) -> dict[str, float]:
    has_val = bool(cfg.data.val_files)
    # an explicit validation covers the whole set, or the user's --trainer.limit_val_batches
    limit = cfg.trainer.lightning.get("limit_val_batches", 1.0)
    if stage in ("validate", "test"):
        _validate(trainer, module, datamodule, limit, ckpt)
        return {k: float(v) for k, v in trainer.callback_metrics.items()}
    if has_val and cfg.trainer.val_before_train and ckpt is None:
        _validate(trainer, module, datamodule, limit)
    trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt)
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    test_freq = cfg.trainer.test_freq
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
