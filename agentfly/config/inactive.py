"""Settings a run was given but will not use: named once, with the reason, never dropped silently.

A key is *inactive* when another setting turns off what it configures: the critic's keys when the
advantage estimator trains no critic, the in-reward KL controller when
``algorithm.use_kl_in_reward=False``, FSDP settings when the strategy does not shard, vLLM's
settings with the transformers engine, validation sampling when validation is greedy. verl
accepts such keys in silence; here :func:`inactive_settings` lists those the user *set* (in a
config file or on the command line) so the run can say so. Keys that can never take effect in
this build are refused instead (:mod:`agentfly.config.validate`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from omegaconf import OmegaConf

from agentfly.config.schema_actor_critic import PREFIX_CACHING_ENGINES

Cond = Callable[[Any], str | None]  # the reason the key is inactive, or None when it is used


@dataclass(frozen=True)
class Rule:
    """Keys under ``prefixes`` (but those under ``exempt``) are inactive when ``why(cfg)`` gives
    a reason."""

    prefixes: tuple[str, ...]
    why: Cond
    exempt: tuple[str, ...] = ()

    def covers(self, key: str) -> bool:
        def under(prefixes: tuple[str, ...]) -> bool:
            return any(key == p or key.startswith(p + ".") for p in prefixes)

        return under(self.prefixes) and not under(self.exempt)


def _estimator(cfg: Any) -> Any:
    from agentfly.estimators import get_estimator

    return get_estimator(cfg.algorithm.adv_estimator)


def _no_critic(cfg: Any) -> str | None:
    if _estimator(cfg).needs_critic:
        return None
    return f"algorithm.adv_estimator={cfg.algorithm.adv_estimator} trains no critic"


def _no_reference(cfg: Any) -> str | None:
    if cfg.actor_rollout_ref.actor.use_kl_loss or cfg.algorithm.use_kl_in_reward:
        return None
    return "no KL term (use_kl_loss and use_kl_in_reward are off), so no reference model is loaded"


def _lora_on(cfg: Any) -> str | None:
    if not cfg.actor_rollout_ref.model.lora.rank:
        return None
    return (
        "actor_rollout_ref.model.lora.rank>0: the reference is the actor's base with the adapter "
        "off, in actor_rollout_ref.actor.fsdp_config.model_dtype"
    )


def _weights_in_place(cfg: Any) -> str | None:
    if cfg.actor_rollout_ref.rollout.num_engines != 0:
        return None
    return "actor_rollout_ref.rollout.num_engines=0: the engine takes the weights in place, nothing is sent"


def _lora_off(cfg: Any) -> str | None:
    if cfg.actor_rollout_ref.model.lora.rank:
        return None
    return "actor_rollout_ref.model.lora.rank=0: no adapter, the whole model trains"


def _greedy_validation(cfg: Any) -> str | None:
    if not cfg.data.val_files:
        return "no data.val_files"
    if not cfg.actor_rollout_ref.rollout.val_kwargs.do_sample:
        return "validation is greedy (actor_rollout_ref.rollout.val_kwargs.do_sample=False)"
    return None


def _no_validation(cfg: Any) -> str | None:
    return None if cfg.data.val_files else "no data.val_files"


def _steps_given(cfg: Any) -> str | None:
    steps = cfg.trainer.total_training_steps
    return None if steps is None else f"trainer.total_training_steps={steps} sets the run's length"


def _no_harness(cfg: Any) -> str | None:
    harness = cfg.agent.harness
    none = harness.command is None and harness.function is None
    return "no agent.harness.command or .function: the built-in agent loop runs the chains" if none else None


def _nothing_resumed(cfg: Any) -> str | None:
    mode = cfg.trainer.resume_mode
    return "trainer.resume_mode=disable: nothing is resumed" if mode == "disable" else None


def bypass_mode(cfg: Any) -> bool:
    """``algorithm.rollout_correction.bypass_mode`` resolved: ``None`` is on with the
    ``bypass_mode`` policy loss, and off ``sync`` when no importance weight or rejection is chosen."""
    corr = cfg.algorithm.rollout_correction
    if corr.bypass_mode is not None:
        return bool(corr.bypass_mode)
    if cfg.actor_rollout_ref.actor.policy_loss.loss_mode == "bypass_mode":
        return True
    no_weights = corr.rollout_is is None and corr.rollout_rs is None
    return str(cfg.trainer.rollout_mode) != "sync" and no_weights


def _no_old_log_prob_pass(cfg: Any) -> str | None:
    """The rollout-time log-probabilities are recomputed only when an update reuses the rollout
    or a rejection needs them, and never in bypass mode (but for the full-vocabulary KL)."""
    actor, alg = cfg.actor_rollout_ref.actor, cfg.algorithm
    corr = alg.rollout_correction
    if alg.use_kl_in_reward and alg.kl_penalty == "full":
        return None
    if bypass_mode(cfg):
        return (
            "algorithm.rollout_correction.bypass_mode=True: the engine's log-probabilities stand "
            "for the rollout-time ones"
        )
    trajectories = cfg.data.train_batch_size * cfg.agent.run_config.num_chains
    reuses = actor.ppo_epochs > 1 or trajectories > actor.ppo_mini_batch_size or alg.use_kl_in_reward
    if reuses or corr.rollout_rs is not None:
        return None
    return (
        "one update per rollout (ppo_epochs=1, one mini-batch) needs no separate pass for the "
        "rollout-time log-probabilities"
    )


def _off(key: str) -> Cond:
    """Inactive while ``key`` is None (the feature it names is off)."""

    def why(cfg: Any) -> str | None:
        return f"{key}=None" if OmegaConf.select(cfg, key) is None else None

    return why


def _is_threshold_unused(cfg: Any) -> str | None:
    corr = cfg.algorithm.rollout_correction
    if corr.rollout_is is not None or (corr.rollout_rs is not None and corr.rollout_rs_threshold is None):
        return None
    return (
        "algorithm.rollout_correction.rollout_is=None, and no rejection takes it as its bound"
    )


#: verl's policy losses that read no clip range, and those that read no ``clip_ratio_c``
_NO_CLIP_RANGE = ("sapo", "gpg", "kl_cov", "dro")
_NO_CLIP_C = ("gspo", "cispo", "sapo", "gpg", "clip_cov", "kl_cov", "geo_mean", "dro")


def _loss_ignores(losses: tuple[str, ...]) -> Cond:
    """Inactive under the policy losses ``losses``, and ``bypass_mode``'s ``reinforce`` (a user's
    ``module:attr`` loss may read anything)."""

    def why(cfg: Any) -> str | None:
        mode = cfg.actor_rollout_ref.actor.policy_loss.loss_mode
        if mode in losses:
            return f"actor_rollout_ref.actor.policy_loss.loss_mode={mode} does not read it"
        if mode == "bypass_mode" and cfg.algorithm.rollout_correction.loss_type == "reinforce":
            return "algorithm.rollout_correction.loss_type=reinforce (loss_mode=bypass_mode) does not read it"
        return None

    return why


def _unless(key: str, active: Any) -> Cond:
    """Inactive unless ``key`` has the value ``active``."""

    def why(cfg: Any) -> str | None:
        value = OmegaConf.select(cfg, key)
        return None if value == active else f"{key}={value}"

    return why


def _one_chain(cfg: Any) -> str | None:
    if cfg.agent.run_config.num_chains != 1:
        return None
    return "agent.run_config.num_chains=1: a group of one chain always stays (verl's rule), nothing is filtered"


def _warmup_steps_given(prefix: str) -> Cond:
    def why(cfg: Any) -> str | None:
        steps = OmegaConf.select(cfg, prefix).lr_warmup_steps
        return None if steps is None or steps < 0 else f"{prefix}.lr_warmup_steps={steps} is given"

    return why


def _clip_sides_given(cfg: Any) -> str | None:
    actor = cfg.actor_rollout_ref.actor
    if actor.clip_ratio_low is not None and actor.clip_ratio_high is not None:
        return "clip_ratio_low and clip_ratio_high are both given"
    return None


def _unused_by_estimator(setting: str, what: str) -> Cond:
    """Inactive when the estimator does not read ``setting`` (its registered ``uses``)."""

    def why(cfg: Any) -> str | None:
        est = _estimator(cfg)
        return None if setting in est.uses else f"algorithm.adv_estimator={est.name} {what}"

    return why


def _no_anchor_states(cfg: Any) -> str | None:
    """Anchor states are grouped only for an estimator that reads them (GiGPO's step groups)."""
    est = _estimator(cfg)
    return None if est.needs_turns else f"algorithm.adv_estimator={est.name} has no step groups"


def _no_prefix_caching(cfg: Any) -> str | None:
    name = cfg.actor_rollout_ref.rollout.name
    if name in PREFIX_CACHING_ENGINES:
        return None
    return f"actor_rollout_ref.rollout.name={name}: only {' and '.join(PREFIX_CACHING_ENGINES)} cache prefixes"


def _no_graphs(cfg: Any) -> str | None:
    name = cfg.actor_rollout_ref.rollout.name
    if name in ("transformers", "vllm"):
        return None
    return f"actor_rollout_ref.rollout.name={name}: only transformers and vllm capture CUDA graphs"


def _no_prefix_cache_budget(cfg: Any) -> str | None:
    rollout = cfg.actor_rollout_ref.rollout
    if rollout.name != "transformers":
        return (
            f"actor_rollout_ref.rollout.name={rollout.name}: only the transformers engine keeps "
            "a prefix cache of its own"
        )
    if not rollout.enable_prefix_caching:
        return "actor_rollout_ref.rollout.enable_prefix_caching=False"
    return None


def _wandb_off(cfg: Any) -> str | None:
    if "wandb" in [str(n) for n in cfg.trainer.logger]:
        return None
    return "no wandb logger, and trainer.default_local_dir is given (it names nothing else)"


def _by_rows(flag: str, default: str | None = None) -> Cond:
    """Inactive while the pass of ``flag`` (a ``*use_dynamic_bsz``; when null, ``default``'s
    value) forms its micro-batches by trajectories, not by tokens."""

    def why(cfg: Any) -> str | None:
        value = OmegaConf.select(cfg, flag)
        if value is None and default is not None:
            value = OmegaConf.select(cfg, default)
        return None if value else f"{flag}={value}, so micro-batches go by trajectories"

    return why


def _no_dynamic_pass(cfg: Any) -> str | None:
    """The actor's token budget is read by any actor-side pass that goes by tokens: the update's,
    or the rollout's or the reference's pass without a budget of its own."""
    actor, A = cfg.actor_rollout_ref.actor, "actor_rollout_ref."
    for section in (cfg.actor_rollout_ref.rollout, cfg.actor_rollout_ref.ref):
        if section.log_prob_use_dynamic_bsz and section.log_prob_max_token_len_per_gpu is None:
            return None
    return None if actor.use_dynamic_bsz else f"{A}actor.use_dynamic_bsz=False"


def _by_tokens(flag: str, default: str | None = None) -> Cond:
    """Inactive while the pass of ``flag`` goes by tokens (the trajectory count is then unused)."""
    rows = _by_rows(flag, default)
    return lambda cfg: None if rows(cfg) else f"{flag} is on, so micro-batches go by tokens"


def _compatibility(cfg: Any) -> str | None:
    return "kept for AgentFly's commands; its only value names what agentfly always does"


A = "actor_rollout_ref."
LOSS_MODE = A + "actor.policy_loss.loss_mode"
RULES: tuple[Rule, ...] = (
    Rule(("agent.use_agent", "agent.init_config.backend"), _compatibility),
    Rule(("critic",), _no_critic, exempt=("critic.enable",)),  # it agrees with the estimator or is refused
    Rule(("trainer.critic_warmup",), _no_critic),
    Rule(("algorithm.kl_ctrl", "algorithm.kl_penalty"), _unless("algorithm.use_kl_in_reward", True)),
    Rule((A + "actor.kl_loss_coef", A + "actor.kl_loss_type"), _unless(A + "actor.use_kl_loss", True)),
    Rule((A + "ref",), _no_reference),
    Rule((A + "ref.fsdp_config.model_dtype",), _lora_on),
    Rule(tuple(A + "model.lora." + k for k in ("alpha", "target_modules", "merge", "export")), _lora_off),
    Rule(
        (A + "actor.fsdp_config", A + "ref.fsdp_config", "critic.model.fsdp_config"),
        _unless(A + "actor.strategy", "fsdp"),
        exempt=tuple(p + ".model_dtype" for p in (A + "actor.fsdp_config", A + "ref.fsdp_config", "critic.model.fsdp_config")),
    ),  # model_dtype: under every strategy
    Rule((A + "rollout.checkpoint_engine",), _weights_in_place),
    Rule((A + "rollout.gpu_memory_utilization",), _unless(A + "rollout.name", "vllm")),
    Rule((A + "rollout.enforce_eager",), _no_graphs),
    Rule((A + "rollout.enable_prefix_caching",), _no_prefix_caching),
    Rule((A + "rollout.prefix_cache_max_gib",), _no_prefix_cache_budget),
    Rule(
        tuple(A + "rollout.val_kwargs." + k for k in ("temperature", "top_p", "top_k", "n", "also_greedy")),
        _greedy_validation,
    ),
    Rule(
        (A + "rollout.val_kwargs.do_sample", "data.val_batch_size", "trainer.test_freq", "trainer.val_before_train"),
        _no_validation,
    ),
    Rule(("trainer.total_epochs",), _steps_given),
    Rule(("agent.harness.timeout", "agent.harness.request_timeout", "agent.harness.sandbox",
          "agent.harness.failures"), _no_harness),
    Rule(("trainer.resume_from_path",), _unless("trainer.resume_mode", "resume_path")),
    Rule(("trainer.resume_changed_config",), _nothing_resumed),
    Rule(("trainer.max_staleness",), _unless("trainer.rollout_mode", "async")),
    Rule((A + "rollout.log_prob_micro_batch_size_per_gpu",), _no_old_log_prob_pass),
    Rule(("algorithm.rollout_correction.rollout_is_threshold",), _is_threshold_unused),
    Rule(("algorithm.rollout_correction.rollout_rs_threshold",), _off("algorithm.rollout_correction.rollout_rs")),
    Rule((A + "actor.optim.min_lr_ratio", A + "actor.optim.num_cycles"), _unless(A + "actor.optim.warmup_style", "cosine")),
    Rule(("critic.optim.min_lr_ratio", "critic.optim.num_cycles"), _unless("critic.optim.warmup_style", "cosine")),
    Rule((A + "actor.optim.lr_warmup_steps_ratio",), _warmup_steps_given(A + "actor.optim")),
    Rule(("critic.optim.lr_warmup_steps_ratio",), _warmup_steps_given("critic.optim")),
    Rule((A + "actor.clip_ratio",), _clip_sides_given),
    Rule(("data.seed",), _unless("data.shuffle", True)),
    Rule(("data.truncation",), _unless("data.filter_overlong_prompts", False)),  # filtered instead
    Rule(("algorithm.norm_adv_by_std_in_grpo",), _unused_by_estimator("norm_adv_by_std_in_grpo", "does not divide by a group std")),
    Rule(("algorithm.gamma",), _unused_by_estimator("gamma", "does not discount")),
    Rule(("algorithm.lam",), _unused_by_estimator("lam", "has no GAE lambda")),
    Rule(("algorithm.gigpo.step_advantage_w",), _unused_by_estimator("step_advantage_w", "has no step-level advantage")),
    Rule(("algorithm.gigpo.mode",), _unused_by_estimator("gigpo_mode", "has no GiGPO normalisation")),
    Rule(("algorithm.gigpo.enable_similarity", "algorithm.gigpo.similarity_thresh"), _no_anchor_states),
    Rule(("algorithm.gigpo.similarity_thresh",), _unless("algorithm.gigpo.enable_similarity", True)),
    Rule((A + "actor.loss_scale_factor",), _unless(A + "actor.loss_agg_mode", "seq-mean-token-sum-norm")),
    Rule(tuple(f"{A}actor.policy_loss.clip_cov_{k}" for k in ("ratio", "lb", "ub")), _unless(LOSS_MODE, "clip_cov")),
    Rule((A + "actor.policy_loss.kl_cov_ratio", A + "actor.policy_loss.ppo_kl_coef"), _unless(LOSS_MODE, "kl_cov")),
    Rule((A + "actor.policy_loss.dro_beta",), _unless(LOSS_MODE, "dro")),
    Rule((A + "actor.tau_pos", A + "actor.tau_neg"), _unless(LOSS_MODE, "sapo")),
    Rule(("algorithm.rollout_correction.loss_type",), _unless(LOSS_MODE, "bypass_mode")),
    Rule(tuple(A + "actor.clip_ratio" + k for k in ("", "_low", "_high")), _loss_ignores(_NO_CLIP_RANGE)),
    Rule((A + "actor.clip_ratio_c",), _loss_ignores(_NO_CLIP_C)),
    Rule(("critic.loss_scale_factor",), _unless("critic.loss_agg_mode", "seq-mean-token-sum-norm")),
    Rule(("algorithm.max_resamples", "algorithm.resample_budget_s"), _unless("algorithm.failed_chains", "resample")),
    Rule(("algorithm.turn_reward_mode",), _unless("algorithm.use_turn_rewards", True)),
    Rule(("algorithm.filter_groups.metric", "algorithm.filter_groups.max_num_gen_batches"),
         _unless("algorithm.filter_groups.enable", True)),
    Rule(("algorithm.filter_groups",), _one_chain),
    Rule(tuple(f"reward_model.overlong_buffer.{k}" for k in ("len", "penalty_factor", "log")),
         _unless("reward_model.overlong_buffer.enable", True)),
    Rule((A + "actor.ppo_max_token_len_per_gpu",), _no_dynamic_pass),
    Rule((A + "actor.ppo_micro_batch_size_per_gpu",), _by_tokens(A + "actor.use_dynamic_bsz")),
    Rule((A + "rollout.log_prob_max_token_len_per_gpu",),
         _by_rows(A + "rollout.log_prob_use_dynamic_bsz", A + "actor.use_dynamic_bsz")),
    Rule((A + "ref.log_prob_max_token_len_per_gpu",),
         _by_rows(A + "ref.log_prob_use_dynamic_bsz", A + "actor.use_dynamic_bsz")),
    Rule(("critic.ppo_max_token_len_per_gpu", "critic.forward_max_token_len_per_gpu"),
         _by_rows("critic.use_dynamic_bsz", A + "actor.use_dynamic_bsz")),
    Rule(("critic.ppo_micro_batch_size_per_gpu",), _by_tokens("critic.use_dynamic_bsz", A + "actor.use_dynamic_bsz")),
    Rule((A + "rollout.log_prob_micro_batch_size_per_gpu",),
         _by_tokens(A + "rollout.log_prob_use_dynamic_bsz", A + "actor.use_dynamic_bsz")),
    Rule((A + "ref.log_prob_micro_batch_size_per_gpu",),
         _by_tokens(A + "ref.log_prob_use_dynamic_bsz", A + "actor.use_dynamic_bsz")),
)

#: keys whose inactivity depends on another explicitly given key (checked with ``explicit``)
_WANDB_NAMES = ("trainer.project_name", "trainer.experiment_name")


def inactive_settings(cfg: Any, explicit: Iterable[str]) -> list[str]:
    """``"key (reason)"`` for every explicitly given key that this run will not use.

    Args:
        cfg: the composed config.
        explicit: canonical keys set by a config file or the command line.
    """
    given = sorted(set(explicit))
    out: list[str] = []
    for key in given:
        reason = inactive_reason(cfg, key)
        if reason is None and key in _WANDB_NAMES and "trainer.default_local_dir" in given:
            reason = _wandb_off(cfg)
        if reason:
            out.append(f"{key} ({reason})")
    return out


def inactive_reason(cfg: Any, key: str) -> str | None:
    """Why ``key`` has no effect in the run of ``cfg`` (the first of :data:`RULES` covering it
    that gives a reason), or None: it is used."""
    for rule in RULES:
        if rule.covers(key) and (reason := rule.why(cfg)):
            return reason
    return None
