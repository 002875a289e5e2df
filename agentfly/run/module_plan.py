"""The LightningModule's part of the run's plan: the config as the module's settings groups.

:func:`plan_module` builds each group of :mod:`agentfly.modules.settings` once, with what the
module cannot know alone: per-rank batch sizes, the optimizer steps of the run (the schedules'
horizons), the loss constant that defaults to the response budget, the resolved ``bypass_mode``.
The critic's keys that fall back to the actor's were filled when the config was composed
(:func:`agentfly.config.load.compose`); nothing here falls back again.
"""

from __future__ import annotations

from typing import Any

from agentfly.config.inactive import bypass_mode
from agentfly.config.schema_actor_critic import MODEL_DTYPES
from agentfly.modules.settings import (
    CorrectionSettings,
    CriticSettings,
    FSDPSettings,
    KLSettings,
    LoraSettings,
    ModelSettings,
    OptimizerSettings,
    PolicyLossSettings,
    ShardingSettings,
    UpdateSettings,
)
from agentfly.run.topology import Topology

#: ``algorithm.rollout_correction.rollout_rs`` -> the rejection's level (verl's names too)
REJECTION_LEVELS = {"token": "token", "sequence": "sequence", "token_k1": "token", "seq_sum_k1": "sequence"}


def _threshold(value: Any) -> float | str | None:
    """A correction threshold as the module takes it: a number as a float, a band as its text."""
    return value if value is None or isinstance(value, str) else float(value)


def _warmup(optim: Any, total_steps: int) -> int:
    """Warm-up length in optimizer steps: ``lr_warmup_steps``, else the ratio of the run's steps."""
    steps = optim.lr_warmup_steps
    if steps is not None and steps >= 0:
        return int(steps)
    return int(optim.lr_warmup_steps_ratio * total_steps)


def policy_loss_keys(actor: Any) -> dict[str, Any]:
    """The settings of verl's policy losses (``actor.policy_loss.*``, ``actor.tau_*``) that the
    losses of :mod:`agentfly.modules.policy_losses` read."""
    loss = actor.policy_loss
    return dict(
        clip_cov_ratio=float(loss.clip_cov_ratio), clip_cov_lb=float(loss.clip_cov_lb),
        clip_cov_ub=float(loss.clip_cov_ub), kl_cov_ratio=float(loss.kl_cov_ratio),
        ppo_kl_coef=float(loss.ppo_kl_coef),
        dro_beta=None if loss.dro_beta is None else float(loss.dro_beta),
        tau_pos=float(actor.tau_pos), tau_neg=float(actor.tau_neg),
    )


def optimizer_settings(optim: Any, steps: int) -> OptimizerSettings:
    """AdamW and its schedule from an ``optim`` section, over ``steps`` optimizer steps."""
    return OptimizerSettings(
        lr=float(optim.lr),
        betas=tuple(optim.betas),
        weight_decay=float(optim.weight_decay),
        warmup_style=str(optim.warmup_style),
        min_lr_ratio=float(optim.min_lr_ratio),
        num_cycles=float(optim.num_cycles),
        warmup_steps=_warmup(optim, steps),
        decay_steps=steps,
    )


def lora_settings(lora: Any) -> LoraSettings:
    """The policy's ``model.lora`` section (verl's ``lora_rank``, ``lora_alpha``,
    ``target_modules`` arrive here under their canonical names)."""
    targets = lora.target_modules
    return LoraSettings(
        rank=int(lora.rank),
        alpha=float(lora.alpha),
        target_modules=str(targets) if isinstance(targets, str) else tuple(str(t) for t in targets),
        merge=bool(lora.merge),
        export=str(lora.export),
    )


def model_dtype(fsdp: Any) -> str:
    """One model's ``fsdp_config.model_dtype`` as torch's dtype name (None: verl's ``fp32``)."""
    value = fsdp.model_dtype
    return "float32" if value is None else MODEL_DTYPES[str(value)]


def model_settings(
    model: Any, temperature: float = 1.0, *, dtype: str = "float32", reference_dtype: str = "float32"
) -> ModelSettings:
    """The policy model's settings from ``actor_rollout_ref.model``, for ``agentfly fit`` and
    ``agentfly sft`` alike; ``temperature``: the rollout's (1.0 where nothing is sampled);
    ``dtype``/``reference_dtype``: the actor's and the reference's parameter dtypes."""
    return ModelSettings(
        path=str(model.path),
        trust_remote_code=bool(model.trust_remote_code),
        dtype=dtype,
        reference_dtype=reference_dtype,
        temperature=temperature,
        lora=lora_settings(model.lora),
        remove_padding=bool(model.use_remove_padding),
        attn_implementation=model.override_config.attn_implementation,
        fused_logprobs=bool(model.use_fused_kernels),
    )


def fsdp_settings(fsdp: Any) -> FSDPSettings:
    """One model's ``fsdp_config``."""
    return FSDPSettings(
        offload=bool(fsdp.param_offload),
        reshard_after_forward=bool(fsdp.reshard_after_forward),
        size=int(fsdp.fsdp_size),
    )


def update_settings(
    name: str, section: Any, model: Any, *, world: int, budget: float, micro: int | None,
    shuffle_seed: int | None, forward_micro: int | None = None, max_tokens: int | None = None,
    forward_max_tokens: int | None = None,
) -> UpdateSettings:
    """An update's settings from its section (``actor_rollout_ref.actor``, ``critic``) and its
    model's (``enable_gradient_checkpointing``...): the mini-batch per rank, the loss constant
    defaulting to the response ``budget``; ``max_tokens``/``forward_max_tokens``: the token
    budgets of dynamic micro-batches (None: by trajectories)."""
    return UpdateSettings(
        name=name,
        mini_batch_size=max(1, section.ppo_mini_batch_size // world),
        micro_batch_size=micro,
        forward_micro_batch_size=forward_micro,
        epochs=int(section.ppo_epochs),
        shuffle_seed=shuffle_seed,
        grad_clip=float(section.grad_clip),
        loss_agg_mode=str(section.loss_agg_mode),
        loss_scale_factor=float(section.loss_scale_factor or budget),
        gradient_checkpointing=bool(model.enable_gradient_checkpointing),
        activation_offload=bool(model.enable_activation_offload),
        max_token_len=max_tokens,
        forward_max_token_len=forward_max_tokens,
    )


def token_budget(flag: bool | None, budget: int | None, default_flag: bool, default_budget: int) -> int | None:
    """A pass's token budget from verl's ``*use_dynamic_bsz`` and ``*max_token_len_per_gpu``
    (None: each falls back on the default given), or None when the pass goes by trajectories."""
    on = default_flag if flag is None else bool(flag)
    return int(budget or default_budget) if on else None


def optimizer_steps(update: UpdateSettings, iterations: int, per_rank: int) -> int:
    """The run's optimizer steps of ``update``: one per mini-batch, per epoch, per iteration."""
    return iterations * update.epochs * max(1, per_rank // update.mini_batch_size)


def plan_module(cfg: Any, topology: Topology, iterations: int, estimator: Any) -> dict[str, Any]:
    """The LightningModule's keyword arguments, one settings group each; ``estimator``: the
    registered ``algorithm.adv_estimator`` (a critic when it ``needs_critic``)."""
    world = topology.world_size
    actor_cfg, critic_cfg, ref = cfg.actor_rollout_ref.actor, cfg.critic, cfg.actor_rollout_ref.ref
    rollout, model = cfg.actor_rollout_ref.rollout, cfg.actor_rollout_ref.model
    alg, corr = cfg.algorithm, cfg.algorithm.rollout_correction
    per_rank = cfg.data.train_batch_size * cfg.agent.run_config.num_chains // world
    budget = float(rollout.response_length)
    shuffle_seed = int(cfg.trainer.seed) if actor_cfg.shuffle else None  # the critic's order too
    dynamic, tokens = bool(actor_cfg.use_dynamic_bsz), int(actor_cfg.ppo_max_token_len_per_gpu)
    actor = update_settings(
        "actor", actor_cfg, model, world=world, budget=budget, shuffle_seed=shuffle_seed,
        micro=actor_cfg.ppo_micro_batch_size_per_gpu,
        forward_micro=rollout.log_prob_micro_batch_size_per_gpu,
        max_tokens=tokens if dynamic else None,
        forward_max_tokens=token_budget(
            rollout.log_prob_use_dynamic_bsz, rollout.log_prob_max_token_len_per_gpu, dynamic, tokens
        ),
    )
    critic = None
    if estimator.needs_critic:
        critic_mini = max(1, critic_cfg.ppo_mini_batch_size // world)
        update = update_settings(
            "critic", critic_cfg, critic_cfg.model, world=world, budget=budget,
            shuffle_seed=shuffle_seed, micro=int(critic_cfg.ppo_micro_batch_size_per_gpu or critic_mini),
            max_tokens=token_budget(critic_cfg.use_dynamic_bsz, critic_cfg.ppo_max_token_len_per_gpu, dynamic, 0),
            forward_max_tokens=token_budget(
                critic_cfg.use_dynamic_bsz, critic_cfg.forward_max_token_len_per_gpu, dynamic,
                critic_cfg.ppo_max_token_len_per_gpu,
            ),
        )
        critic = CriticSettings(
            path=str(critic_cfg.model.path),
            update=update,
            optim=optimizer_settings(critic_cfg.optim, optimizer_steps(update, iterations, per_rank)),
            cliprange_value=float(critic_cfg.cliprange_value),
            warmup_iterations=int(cfg.trainer.critic_warmup),
            dtype=model_dtype(critic_cfg.model.fsdp_config),
            remove_padding=bool(critic_cfg.model.use_remove_padding),
            attn_implementation=critic_cfg.model.override_config.attn_implementation,
        )
    return dict(
        model=model_settings(
            model, temperature=float(rollout.temperature or 1.0),
            dtype=model_dtype(actor_cfg.fsdp_config), reference_dtype=model_dtype(ref.fsdp_config),
        ),
        actor=actor,
        actor_optim=optimizer_settings(actor_cfg.optim, optimizer_steps(actor, iterations, per_rank)),
        policy_loss=PolicyLossSettings(
            loss_mode=str(actor_cfg.policy_loss.loss_mode),
            clip_ratio_low=float(actor_cfg.clip_ratio_low),
            clip_ratio_high=float(actor_cfg.clip_ratio_high),
            clip_ratio_c=float(actor_cfg.clip_ratio_c),
            entropy_coeff=float(actor_cfg.entropy_coeff),
            **policy_loss_keys(actor_cfg),
        ),
        kl=KLSettings(
            use_kl_loss=bool(actor_cfg.use_kl_loss),
            kl_loss_coef=float(actor_cfg.kl_loss_coef),
            kl_loss_type=str(actor_cfg.kl_loss_type),
            use_kl_in_reward=bool(alg.use_kl_in_reward),
            kl_penalty=str(alg.kl_penalty),
            reference_micro_batch_size=ref.log_prob_micro_batch_size_per_gpu,
            reference_max_token_len=token_budget(
                ref.log_prob_use_dynamic_bsz, ref.log_prob_max_token_len_per_gpu, dynamic, tokens
            ),
        ),
        correction=CorrectionSettings(
            rollout_is=None if corr.rollout_is is None else str(corr.rollout_is),  # type: ignore[arg-type]
            rollout_is_threshold=_threshold(corr.rollout_is_threshold),
            rollout_rs=None if corr.rollout_rs is None else REJECTION_LEVELS[str(corr.rollout_rs)],  # type: ignore[arg-type]
            rollout_rs_threshold=_threshold(corr.rollout_rs_threshold),
            bypass_mode=bypass_mode(cfg),
            loss_type=str(corr.loss_type),  # type: ignore[arg-type]
        ),
        critic=critic,
        fsdp=ShardingSettings(
            actor=fsdp_settings(actor_cfg.fsdp_config),
            reference=fsdp_settings(ref.fsdp_config),
            critic=fsdp_settings(critic_cfg.model.fsdp_config),
        ),
    )
