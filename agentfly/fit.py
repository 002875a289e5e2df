"""From a resolved config to a running Lightning fit: module, data module, callbacks, loggers.

This is the one place that reads the config tree; every component below takes flat keyword
arguments. ``trainer.total_training_steps`` counts RL iterations (rollout + update), however many
optimizer steps each contains.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


def _world(cfg: Any) -> tuple[str, int, int]:
    """(accelerator, devices, num_nodes); GPU requests run on the CPU when there is no GPU."""
    import torch

    requested = int(cfg.trainer.n_gpus_per_node)
    nodes = int(cfg.trainer.nnodes)
    if cfg.trainer.device == "cpu" or not torch.cuda.is_available():
        if cfg.trainer.device == "cuda":
            raise ValueError("trainer.device=cuda but no CUDA device is visible")
        if requested > 1 and "SLURM_NTASKS" not in os.environ:
            logger.warning(
                "no GPU on this machine: trainer.n_gpus_per_node=%d runs as one CPU process", requested
            )
            requested = 1
        return "cpu", max(1, requested), nodes
    return "gpu", requested, nodes


def build_module(cfg: Any, world_size: int) -> Any:
    from agentfly.estimators import get_estimator
    from agentfly.modules.rl_module import AgentRLModule

    actor = cfg.actor_rollout_ref.actor
    needs_critic = get_estimator(cfg.algorithm.adv_estimator).needs_critic
    use_kl_in_reward = bool(cfg.algorithm.use_kl_in_reward)
    total = _total_iterations(cfg)
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
        dtype="float32",
        total_training_steps=total,
    )


def _total_iterations(cfg: Any) -> int:
    if cfg.trainer.total_training_steps:
        return int(cfg.trainer.total_training_steps)
    from agentfly.rollout.data import load_rows

    rows = sum(len(load_rows(f, cfg.data.prompt_key)) for f in cfg.data.train_files)
    return max(1, rows // cfg.data.train_batch_size) * int(cfg.trainer.total_epochs)


def build_datamodule(cfg: Any, world_size: int, run_dir: Path) -> Any:
    from agentfly.rollout.datamodule import RolloutDataModule
    from agentfly.rollout.runner import build_rollout

    if cfg.data.train_batch_size % world_size:
        raise ValueError(f"data.train_batch_size={cfg.data.train_batch_size} does not split over {world_size} ranks")
    val = cfg.actor_rollout_ref.rollout.val_kwargs
    return RolloutDataModule(
        lambda: build_rollout(cfg),
        train_files=list(cfg.data.train_files),
        val_files=list(cfg.data.val_files),
        train_batch_size=cfg.data.train_batch_size // world_size,
        val_batch_size=cfg.data.val_batch_size,
        prompt_key=cfg.data.prompt_key,
        shuffle=cfg.data.shuffle,
        seed=cfg.data.seed,
        val_greedy=not val.do_sample,
        trajectory_dir=str(run_dir / "trajectories"),
    )


def build_callbacks(cfg: Any, run_dir: Path) -> list[Any]:
    from agentfly.callbacks import AdvantageCallback, KLRewardCallback
    from agentfly.callbacks.iterations import IterationCallback
    from agentfly.callbacks.weight_sync import WeightSyncCallback

    alg = cfg.algorithm
    callbacks: list[Any] = [
        AdvantageCallback(alg.adv_estimator, alg.gamma, alg.lam, alg.norm_adv_by_std_in_grpo),
        WeightSyncCallback(),
        IterationCallback(
            total_iterations=_total_iterations(cfg),
            checkpoint_dir=run_dir / "checkpoints",
            save_freq=cfg.trainer.save_freq or -1,
            hf_dir=run_dir / "hf_actor",
        ),
    ]
    if alg.use_kl_in_reward:
        k = alg.kl_ctrl
        callbacks.append(KLRewardCallback(alg.kl_penalty, k.type, k.kl_coef, k.target_kl, k.horizon))
    return callbacks


def build_loggers(cfg: Any, run_dir: Path) -> list[Any]:
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger, WandbLogger

    names = [str(n) for n in cfg.trainer.logger]
    # one version folder per launch (a resumed run adds version_1, ...; none is overwritten)
    loggers: list[Any] = [CSVLogger(str(run_dir), name="metrics")]
    if "tensorboard" in names:
        loggers.append(TensorBoardLogger(str(run_dir), name="tensorboard", version=""))
    if "wandb" in names:
        os.environ.setdefault("WANDB_DIR", str(run_dir))
        loggers.append(
            WandbLogger(project=cfg.trainer.project_name, name=cfg.trainer.experiment_name, save_dir=str(run_dir))
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
    last = run_dir / "checkpoints" / "last.ckpt"
    return str(last) if last.exists() else None


def build_trainer(cfg: Any) -> tuple[Any, Any, Any, str | None]:
    """(Lightning Trainer, module, data module, checkpoint to resume from)."""
    import lightning.pytorch as pl

    pl.seed_everything(int(cfg.trainer.seed), workers=True)
    accelerator, devices, nodes = _world(cfg)
    world = devices * nodes
    run_dir = Path(str(cfg.trainer.default_local_dir))
    run_dir.mkdir(parents=True, exist_ok=True)
    strategy = cfg.actor_rollout_ref.actor.strategy
    if strategy == "fsdp" and accelerator == "cpu":
        logger.warning("FSDP needs GPUs; using DDP on the CPU")
        strategy = "ddp"
    if strategy == "auto" and world > 1:
        strategy = "ddp"
    test_freq = cfg.trainer.test_freq
    trainer = pl.Trainer(
        accelerator=accelerator,
        devices=devices,
        num_nodes=nodes,
        strategy=strategy,
        max_epochs=-1,
        max_steps=-1,
        logger=build_loggers(cfg, run_dir),
        callbacks=build_callbacks(cfg, run_dir),
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
    module = build_module(cfg, world)
    datamodule = build_datamodule(cfg, world, run_dir)
    return trainer, module, datamodule, resume_path(cfg, run_dir)


def run_fit(cfg: Any, stage: str = "fit") -> dict[str, float]:
    """Validate (``val_before_train``), train, validate again; returns the last logged metrics."""
    trainer, module, datamodule, ckpt = build_trainer(cfg)
    has_val = bool(cfg.data.val_files)
    if stage in ("validate", "test"):
        trainer.validate(module, datamodule=datamodule, ckpt_path=ckpt)
        datamodule.close()
        return {k: float(v) for k, v in trainer.callback_metrics.items()}
    if has_val and cfg.trainer.val_before_train and ckpt is None:
        trainer.validate(module, datamodule=datamodule)
    trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt)
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    test_freq = cfg.trainer.test_freq
    validated_at_end = test_freq and test_freq > 0 and module.iteration % test_freq == 0
    if has_val and test_freq != -1 and not validated_at_end:
        trainer.validate(module, datamodule=datamodule)
        metrics.update({k: float(v) for k, v in trainer.callback_metrics.items()})
    datamodule.close()
    return metrics
