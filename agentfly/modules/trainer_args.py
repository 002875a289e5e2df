"""The Lightning ``Trainer`` arguments agentfly sets itself, in a module that imports nothing, so
the config layer checks a command line against them before Lightning loads
(:mod:`agentfly.config.keys`) and :class:`~agentfly.modules.trainer.AgentflyTrainer` refuses them."""

from __future__ import annotations

#: Trainer arguments that would break how agentfly drives training (manual optimization, one
#: batch per RL iteration, its own checkpoints and data sharding), with what to use instead.
MANAGED: dict[str, str] = {
    "enable_checkpointing": "trainer.save_freq",
    "accumulate_grad_batches": "actor_rollout_ref.actor.ppo_mini_batch_size / ppo_micro_batch_size_per_gpu",
    "gradient_clip_val": "actor_rollout_ref.actor.grad_clip",
    "gradient_clip_algorithm": "actor_rollout_ref.actor.grad_clip (norm clipping)",
    "val_check_interval": "trainer.test_freq",
    "check_val_every_n_epoch": "trainer.test_freq",
    "limit_train_batches": "trainer.total_training_steps",
    "use_distributed_sampler": "nothing (the rollout data module shards prompts by rank)",
    "reload_dataloaders_every_n_epochs": "nothing (prompts are drawn per iteration)",
    "plugins": "nothing (SLURM's is set when SLURM runs the job)",
}
#: Trainer arguments set by the run's plan: verl's keys express them (aliases), or MANAGED.
PLANNED_TRAINER_ARGS = frozenset(
    {"max_steps", "max_epochs", "devices", "num_nodes", "accelerator", "default_root_dir", "strategy", *MANAGED}
)
