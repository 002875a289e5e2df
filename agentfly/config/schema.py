"""AgentFly's ``agent`` and verl's ``algorithm``, ``actor_rollout_ref`` and ``critic`` sections, typed.

Each dataclass is a group of ``agentfly fit`` (LightningCLI parses and checks them: a field's type
states its range or its choices, its docstring line is the key's help). ``data.*`` are the
arguments of :class:`~agentfly.rollout.datamodule.RolloutDataModule` and ``trainer.*`` those of
:class:`~agentfly.modules.trainer.AgentflyTrainer`. Defaults are verl's ``ppo_trainer.yaml`` where the
AgentFly documents are silent, and the AgentFly documents' where they state one. Departures from
verl, each on purpose:

- ``actor.use_kl_loss=True``, ``actor.entropy_coeff=0.001``,
  ``model.enable_gradient_checkpointing=False``, ``trainer.logger=['console']``: the AgentFly
  training guide's stated defaults.
- ``rollout.name='transformers'`` (verl: required): the embedded transformers engine, so a CPU
  run needs no vLLM (verl's ``hf`` is accepted for it, as AgentFly's ``agent_type=hf`` is for the
  ``hermes`` agent type; the composed config holds the registered names); ``rollout.tensor_model_parallel_size=1`` (verl: 2), so one GPU works.
- ``actor.strategy='auto'`` (verl: ``fsdp``) and ``trainer.device='auto'`` (verl: ``cuda``).
- ``data.filter_overlong_prompts=True`` (verl: False) and ``data.max_prompt_length`` = the
  context less one token (verl: 512): a row whose prompt leaves no room is dropped and counted.
- Model paths default to ``None`` (verl: a placeholder path).
- ``ppo_mini_batch_size`` counts *trajectories* (after the ``num_chains`` expansion; see
  :mod:`agentfly.config.validate`).

A key the LightningModule receives unchanged takes its default from the module's settings group
(:mod:`agentfly.modules.settings`), so the two cannot disagree: the value is written there once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from jsonargparse.typing import (
    ClosedUnitInterval,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    restricted_number_type,
)

from agentfly.modules.loss_modes import LOSS_AGG_MODES
from agentfly.modules.settings import (
    CRITIC_LR,
    CorrectionSettings,
    CriticSettings,
    FSDPSettings,
    KLSettings,
    ModelSettings,
    OptimizerSettings,
    PolicyLossSettings,
    UpdateSettings,
)

#: a fraction in (0, 1]: a nucleus mass, a share of GPU memory
UnitFraction = restricted_number_type("UnitFraction", float, [(">", 0), ("<=", 1)])
LossAggMode = Literal[LOSS_AGG_MODES]  # type: ignore[valid-type]

# -------------------------------------------------------------------------------------- agent


@dataclass
class AgentInitConfig:
    """How the agent is built (canonical home of ``agent.tools``, ``agent.template``...).

    Attributes:
        agent_type: agent class by registry name (``hermes``, ``react``, ``code``, ``action``...;
            AgentFly's ``hf`` is ``hermes``) or ``module:attr``.
        template: chat template name; ``None`` = the tokenizer's own template.
        tools: tool names available to the agent.
        reward_name: registered reward function.
        backend: generation backend during training; only ``async_verl`` (AgentFly's value),
            which names agentfly's asynchronous engine pool: any other value is refused.
            ``agent.init_config.backend_config.backend`` is the same node.
        tool_parser_name: the agent type whose parser reads the model's turns (``hermes``,
            ``react``, ``code``, ``action``); ``None`` = the agent type's own.
        max_model_len: longest conversation in tokens a chain may reach; ``None`` = the model's.
        system_prompt: replaces the agent type's default system prompt.
        tool_config: per-tool settings by tool name (e.g.
            ``{search: {corpus_path: ..., top_k: 3}, calculator: {max_digits: 50}}``): each tool
            declares the settings it accepts (plus ``timeout`` and ``max_output_chars``); names
            and types are checked when the config is composed.
        plugins: the user's modules to import before any name is looked up (dotted module
            names or ``.py`` file paths), so that what they register can be named; any name
            above (and ``algorithm.adv_estimator``, ``actor_rollout_ref.rollout.name``) may also
            be a ``module:attr`` of the user's.
        reward_timeout: seconds a reward call may take before it scores 0 as a ``timeout``
            failure (its worker process killed); ``None`` = the reward's own
            ``@reward(timeout=)`` (60 s when it sets none).
    """

    agent_type: str = "hermes"
    template: str | None = None
    tools: list[str] = field(default_factory=list)
    reward_name: str | None = None
    backend: str = "async_verl"
    tool_parser_name: str | None = None
    max_model_len: PositiveInt | None = None
    system_prompt: str | None = None
    tool_config: dict[str, Any] = field(default_factory=dict)
    plugins: list[str] = field(default_factory=list)
    reward_timeout: PositiveFloat | None = None


@dataclass
class GenerationConfig:
    """Sampling per turn during training rollouts.

    Attributes:
        max_tokens: tokens generated per turn at most.

    ``agent.generation_config.temperature``/``top_p`` (and ``agent.run_config...``) are spellings
    of ``actor_rollout_ref.rollout.temperature``/``top_p``: one sampling setting, one key.
    """

    max_tokens: PositiveInt = 512


@dataclass
class ContextConfig:
    """Where stateful tool and reward resources live.

    Attributes:
        resource_backend: ``local`` (in-process) or ``ray`` (Ray actors).
    """

    resource_backend: Literal["local", "ray"] = "local"


@dataclass
class WorkersConfig:
    """The worker processes that run sync tools and rewards (killed at a call's deadline).

    Attributes:
        num_workers: processes at most, started on first use and reused; ``None`` = the
            usable CPU count, within 2..8.
        memory_mb: each worker's address-space limit in MiB (``RLIMIT_AS``, virtual memory,
            set after the plugins are imported): an allocation past it is a ``MemoryError`` in
            the worker (a counted ``exception`` failure); 0 = no limit (needed by code that
            initialises CUDA, which reserves far more address space than it uses).
        start_timeout: seconds a worker may take to start (import the plugins) before the
            rollout stops with an error naming what failed.
    """

    num_workers: PositiveInt | None = None
    memory_mb: NonNegativeInt = 4096
    start_timeout: PositiveFloat = 60.0


@dataclass
class AgentRunConfig:
    """The shape of a rollout (canonical home of ``agent.max_turns``, ``agent.num_chains``...).

    Attributes:
        max_turns: generation/tool turns per chain at most (``agent.max_steps`` is the same node).
        num_chains: chains (trajectories) per prompt; the group size of GRPO/RLOO.
        max_concurrent_chains: chains running at once at most; ``None`` = no extra cap.
        generation_config: per-turn sampling.
        context_config: resource placement.
        workers: the worker processes of sync tools and rewards.
    """

    max_turns: PositiveInt = 3
    num_chains: PositiveInt = 1
    max_concurrent_chains: PositiveInt | None = None
    generation_config: GenerationConfig = field(default_factory=GenerationConfig)
    context_config: ContextConfig = field(default_factory=ContextConfig)
    workers: WorkersConfig = field(default_factory=WorkersConfig)


@dataclass
class AgentConfig:
    """The agent rollout path (AgentFly's own namespace).

    Attributes:
        use_agent: use the multi-turn agent loop; only ``True`` (verl's single-turn path is not
            built, ``False`` is refused).
        train_on_last_turn: compute the loss on the last assistant turn only.
        init_config: how the agent is built.
        run_config: how chains are run.
    """

    use_agent: bool = True
    train_on_last_turn: bool = False
    init_config: AgentInitConfig = field(default_factory=AgentInitConfig)
    run_config: AgentRunConfig = field(default_factory=AgentRunConfig)


# ---------------------------------------------------------------------------------- algorithm


@dataclass
class KLControlConfig:
    """The KL-in-reward coefficient controller.

    Attributes:
        type: ``fixed`` or ``adaptive`` (Ziegler et al., 2019).
        kl_coef: (initial) KL coefficient.
        target_kl: target KL of the adaptive controller.
        horizon: horizon of the adaptive controller, in samples.
    """

    type: Literal["fixed", "adaptive"] = "fixed"
    kl_coef: NonNegativeFloat = 0.001
    target_kl: float = 0.1
    horizon: PositiveInt = 10000


@dataclass
class RolloutCorrectionConfig:
    """Off-policy correction between the engine that sampled the tokens (the behaviour policy)
    and the trainer (:mod:`agentfly.modules.rollout_correction`; verl's names and meanings).
    ``w = π_prox / π_behav``, π_prox the actor's policy before the update. ``rollout_rs`` takes
    ``token``/``sequence``: verl's ``token_k1``/``seq_sum_k1`` with an upper bound only; verl's
    other rejection statistics, ``rollout_is_batch_normalize`` and ``loss_type`` are not built.

    Attributes:
        rollout_is: truncated importance sampling (TIS): each token's policy loss times
            ``min(w, rollout_is_threshold)``, w per ``token`` or per ``sequence`` (the product
            over the chain's sampled tokens); ``None`` = off.
        rollout_is_threshold: the TIS cap C.
        rollout_rs: rejection (masked IS): the tokens (``token``), or whole chains (``sequence``),
            whose w exceeds ``rollout_rs_threshold`` leave the actor's loss and its denominator (the
            advantages keep them); ``None`` = off. With ``rollout_is`` at the same level and
            bound it is Yao et al.'s MIS, ``w · 1{w ≤ C}``.
        rollout_rs_threshold: the rejection bound (upper only); ``None`` = ``rollout_is_threshold``.
        bypass_mode: the engine's log-probabilities are PPO's old policy (the ratio and the clip
            are π_θ / π_behav; no pass recomputes the actor's); ``False``: decoupled PPO, the ratio
            and the clip use π_prox and ``rollout_is``/``rollout_rs`` weigh π_prox against π_behav.
            ``None`` = ``True`` when ``trainer.rollout_mode`` is not ``sync`` and neither
            ``rollout_is`` nor ``rollout_rs`` is set (stale samples are then clipped against the
            policy that sampled them), else ``False``.
    """

    rollout_is: Literal["token", "sequence"] | None = None
    rollout_is_threshold: PositiveFloat = CorrectionSettings.rollout_is_threshold
    rollout_rs: Literal["token", "sequence"] | None = None
    rollout_rs_threshold: PositiveFloat | None = None
    bypass_mode: bool | None = None


@dataclass
class AlgorithmConfig:
    """The RL algorithm.

    Attributes:
        adv_estimator: registered advantage estimator (``gae``, ``grpo``, ``rloo``...).
        gamma: discount per sampled token.
        lam: GAE lambda.
        norm_adv_by_std_in_grpo: divide group-relative advantages by the group std.
        use_kl_in_reward: subtract ``kl_coef * KL`` from the token rewards.
        kl_penalty: KL estimator in the reward (``kl``, ``abs``, ``mse``, ``low_var_kl``...).
        kl_ctrl: the KL coefficient controller.
        rollout_correction: the off-policy correction (off by default).
        failed_chains: a chain the infrastructure failed (engine error, tool past its deadline
            or its worker dead, reward failure; see :mod:`agentfly.rollout.failures`) never
            enters a baseline as reward 0: ``resample`` runs it again (same prompt and group,
            a new seed), ``drop`` leaves its whole group out of the batch (one rank only),
            ``keep`` trains on it as reward 0; counted as ``rollout/failed_chains/<reason>``.
        max_resamples: re-runs of a failed chain at most (``resample``) before its group is
            dropped.
    """

    adv_estimator: str = "gae"
    gamma: ClosedUnitInterval = 1.0
    lam: ClosedUnitInterval = 1.0
    norm_adv_by_std_in_grpo: bool = True
    use_kl_in_reward: bool = KLSettings.use_kl_in_reward
    kl_penalty: str = KLSettings.kl_penalty
    kl_ctrl: KLControlConfig = field(default_factory=KLControlConfig)
    rollout_correction: RolloutCorrectionConfig = field(default_factory=RolloutCorrectionConfig)
    failed_chains: Literal["resample", "drop", "keep"] = "resample"
    max_resamples: NonNegativeInt = 3


# -------------------------------------------------------------------------- actor_rollout_ref


@dataclass
class OptimConfig:
    """AdamW with warm-up and an optional cosine decay.

    Attributes:
        lr: peak learning rate.
        lr_warmup_steps_ratio: warm-up length as a fraction of the optimizer steps.
        lr_warmup_steps: warm-up length in optimizer steps; ``-1`` = use the ratio.
        weight_decay: AdamW weight decay.
        betas: AdamW betas.
        warmup_style: ``constant`` or ``cosine`` after warm-up.
        min_lr_ratio: floor of the cosine schedule, as a fraction of ``lr``.
        num_cycles: cosine cycles over the run.
    """

    lr: NonNegativeFloat = OptimizerSettings.lr
    lr_warmup_steps_ratio: ClosedUnitInterval = 0.0
    lr_warmup_steps: int = -1
    weight_decay: NonNegativeFloat = OptimizerSettings.weight_decay
    betas: list[float] = field(default_factory=lambda: list(OptimizerSettings.betas))
    warmup_style: Literal["constant", "cosine"] = OptimizerSettings.warmup_style
    min_lr_ratio: ClosedUnitInterval = OptimizerSettings.min_lr_ratio
    num_cycles: NonNegativeFloat = OptimizerSettings.num_cycles


@dataclass
class FSDPConfig:
    """FSDP sharding and offloading (used when the strategy is ``fsdp``).

    Attributes:
        param_offload: keep parameters on CPU between uses.
        optimizer_offload: keep optimizer state on CPU.
        reshard_after_forward: free gathered parameters after the forward pass.
        fsdp_size: shard group size; ``-1`` = all ranks.
    """

    param_offload: bool = FSDPSettings.offload
    optimizer_offload: bool = FSDPSettings.offload
    reshard_after_forward: bool = FSDPSettings.reshard_after_forward
    fsdp_size: int = FSDPSettings.size


@dataclass
class PolicyLossConfig:
    """The policy loss (verl's ``actor.policy_loss``).

    Attributes:
        loss_mode: a registered policy loss (``vanilla``: PPO's clipped surrogate with the dual
            clip; :data:`agentfly.modules.losses.POLICY_LOSSES`) or a ``module:attr`` of the
            user's.
    """

    loss_mode: str = PolicyLossSettings.loss_mode


@dataclass
class ActorConfig:
    """The policy's PPO update.

    Attributes:
        strategy: Lightning strategy: ``auto``, ``ddp`` or ``fsdp``.
        ppo_mini_batch_size: trajectories per optimizer step, over all ranks (counted after the
            ``num_chains`` expansion; AgentFly's scripts use ``train_batch_size * num_chains`` for
            one update per rollout).
        ppo_micro_batch_size_per_gpu: trajectories per forward/backward on one device;
            ``None`` = the whole per-device mini-batch (no gradient accumulation).
        ppo_epochs: passes over each rollout batch.
        shuffle: draw each PPO epoch's mini-batches from a fresh (seeded) permutation of the
            rollout's trajectories instead of in rollout order.
        clip_ratio: PPO clip range ε.
        clip_ratio_low: lower clip range; ``None`` = ``clip_ratio``.
        clip_ratio_high: upper clip range; ``None`` = ``clip_ratio`` (DAPO's clip-higher).
        clip_ratio_c: dual-clip constant (Ye et al., 2020) for negative advantages.
        loss_agg_mode: how token losses become one (:func:`agentfly.modules.losses.agg_loss`).
        loss_scale_factor: the constant ``seq-mean-token-sum-norm`` divides by (Dr. GRPO's
            MAX_TOKENS); ``None`` = ``actor_rollout_ref.rollout.response_length``.
        grad_clip: max gradient norm.
        use_kl_loss: add a KL-to-reference term to the loss.
        kl_loss_coef: its coefficient.
        kl_loss_type: its estimator (``kl``, ``abs``, ``mse``, ``low_var_kl``, ``full``...).
        entropy_coeff: entropy bonus coefficient.
        policy_loss: the policy loss (``loss_mode``).
        ulysses_sequence_parallel_size: sequence-parallel degree; only 1 (sequence parallelism
            is not implemented, a larger value is refused).
        optim: the optimizer.
        fsdp_config: FSDP settings.
    """

    strategy: Literal["auto", "ddp", "fsdp"] = "auto"
    ppo_mini_batch_size: PositiveInt = 256
    ppo_micro_batch_size_per_gpu: PositiveInt | None = None
    ppo_epochs: PositiveInt = UpdateSettings.epochs
    shuffle: bool = False
    clip_ratio: NonNegativeFloat = PolicyLossSettings.clip_ratio_low
    clip_ratio_low: NonNegativeFloat | None = None
    clip_ratio_high: NonNegativeFloat | None = None
    clip_ratio_c: float = PolicyLossSettings.clip_ratio_c
    loss_agg_mode: LossAggMode = UpdateSettings.loss_agg_mode
    loss_scale_factor: PositiveFloat | None = None
    grad_clip: NonNegativeFloat = UpdateSettings.grad_clip
    use_kl_loss: bool = KLSettings.use_kl_loss
    kl_loss_coef: NonNegativeFloat = KLSettings.kl_loss_coef
    kl_loss_type: str = KLSettings.kl_loss_type
    entropy_coeff: float = PolicyLossSettings.entropy_coeff
    policy_loss: PolicyLossConfig = field(default_factory=PolicyLossConfig)
    ulysses_sequence_parallel_size: int = 1
    optim: OptimConfig = field(default_factory=OptimConfig)
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)


@dataclass
class ModelConfig:
    """The policy model (shared by actor, rollout engines and reference).

    Attributes:
        path: HF model id or local path (``agent.init_config.model_name_or_path`` is a spelling of it).
        use_remove_padding: pack sequences without padding; only ``False`` (not implemented;
            padding never reaches the LM head or the loss).
        enable_gradient_checkpointing: recompute activations in the backward pass.
        enable_activation_offload: keep the update's saved activations on the CPU (GPU runs).
        trust_remote_code: let Hugging Face run model and tokenizer code shipped with the
            checkpoint (actor, reference, critic, engines).
    """

    path: str | None = None
    use_remove_padding: bool = False
    enable_gradient_checkpointing: bool = UpdateSettings.gradient_checkpointing
    enable_activation_offload: bool = UpdateSettings.activation_offload
    trust_remote_code: bool = ModelSettings.trust_remote_code


@dataclass
class SamplingConfig:
    """Sampling during validation.

    Attributes:
        temperature: sampling temperature when ``do_sample`` (0 = the training temperature).
        top_p: nucleus sampling mass.
        top_k: top-k cut; ``-1`` = none.
        do_sample: sample (``False`` = greedy).
        n: samples per validation prompt.
        also_greedy: with ``do_sample``, also validate greedily (one chain per prompt), logged
            as ``val_greedy/...`` beside the sampled ``val/...`` (agentfly's addition).
    """

    temperature: NonNegativeFloat = 0.0
    top_p: UnitFraction = 1.0
    top_k: int = -1
    do_sample: bool = False
    n: PositiveInt = 1
    also_greedy: bool = False


@dataclass
class RolloutConfig:
    """The generation engines.

    Attributes:
        name: engine kind: ``transformers`` (verl's ``hf``) or ``vllm``.
        temperature: training sampling temperature (``agent.generation_config.temperature``
            is a spelling of it).
        top_p: training nucleus mass (``agent.generation_config.top_p`` is a spelling of it).
        top_k: top-k cut; ``-1`` = none.
        response_length: tokens after the prompt a chain may reach, over all its turns (sampled
            and observation tokens; verl's meaning); the per-turn limit is
            ``agent.run_config.generation_config.max_tokens``. Also the default constant of the
            ``seq-mean-token-sum-norm`` loss.
        gpu_memory_utilization: fraction of GPU memory a vLLM engine may take.
        tensor_model_parallel_size: GPUs per engine.
        log_prob_micro_batch_size_per_gpu: trajectories per log-prob forward on one device;
            ``None`` = the actor's micro-batch.
        n: samples per prompt in verl; must stay 1 with the agent loop (use ``num_chains``).
        num_engines: engines in the pool (Ray actors); 0 = one engine in the training process,
            no Ray; ``None`` resolves to what the machine holds: on GPUs
            ``max(1, n_gpus_per_node * nnodes // tensor_model_parallel_size)``; on the CPU 0
            for ``hf`` engines and one training process on one node without ``RAY_ADDRESS``,
            else 1 (see :mod:`agentfly.topology`).
        dtype: engine weights dtype on GPUs; engines on the CPU run in float32, as training does.
        enforce_eager: disable CUDA graphs and compilation in vLLM; ``None`` = eager on the
            CPU, CUDA graphs on GPUs.
        val_kwargs: sampling during validation.
    """

    name: str = "transformers"
    temperature: NonNegativeFloat = ModelSettings.temperature
    top_p: UnitFraction = 1.0
    top_k: int = -1
    response_length: PositiveInt = 512
    gpu_memory_utilization: UnitFraction = 0.5
    tensor_model_parallel_size: PositiveInt = 1
    log_prob_micro_batch_size_per_gpu: PositiveInt | None = None
    n: int = 1
    num_engines: NonNegativeInt | None = None
    dtype: Literal["bfloat16", "float16", "float32", "auto"] = "bfloat16"
    enforce_eager: bool | None = None
    val_kwargs: SamplingConfig = field(default_factory=SamplingConfig)


@dataclass
class RefConfig:
    """The frozen reference policy (used when a KL term is on).

    Attributes:
        fsdp_config: how FSDP shards the reference (``param_offload``,
            ``reshard_after_forward``, ``fsdp_size``); ``optimizer_offload`` is refused (the
            reference has no optimizer).
        log_prob_micro_batch_size_per_gpu: trajectories per forward on one device;
            ``None`` = the actor's micro-batch.
        ulysses_sequence_parallel_size: sequence-parallel degree (defaults to the actor's).
    """

    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)
    log_prob_micro_batch_size_per_gpu: PositiveInt | None = None
    ulysses_sequence_parallel_size: int | None = None


@dataclass
class ActorRolloutRefConfig:
    """verl's grouping of the policy model, its rollout engines and its reference copy."""

    actor: ActorConfig = field(default_factory=ActorConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    ref: RefConfig = field(default_factory=RefConfig)


# ------------------------------------------------------------------------------------- critic


@dataclass
class CriticModelConfig:
    """The value model.

    Attributes:
        path: HF model id or local path; required when the estimator needs a critic.
        enable_gradient_checkpointing: recompute activations in the backward pass.
        enable_activation_offload: keep the update's saved activations on the CPU (GPU runs).
        use_remove_padding: only ``False`` (see the actor model's).
        fsdp_config: how FSDP shards the critic.
    """

    path: str | None = None
    enable_gradient_checkpointing: bool = True
    enable_activation_offload: bool = UpdateSettings.activation_offload
    use_remove_padding: bool = False
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)


@dataclass
class CriticConfig:
    """The value function (used only by estimators that need one, e.g. ``gae``).

    Attributes:
        model: the value model.
        optim: its optimizer (lr 1e-5 as in verl).
        ppo_mini_batch_size: trajectories per critic step (defaults to the actor's).
        ppo_micro_batch_size_per_gpu: trajectories per forward/backward on one device.
        ppo_epochs: passes per rollout batch (defaults to the actor's).
        cliprange_value: value clipping range.
        grad_clip: max gradient norm.
        loss_agg_mode: loss aggregation (defaults to the actor's).
        loss_scale_factor: ``seq-mean-token-sum-norm``'s constant (defaults to the actor's).
        ulysses_sequence_parallel_size: sequence-parallel degree; only 1 (see the actor's).
    """

    model: CriticModelConfig = field(default_factory=CriticModelConfig)
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=CRITIC_LR))
    ppo_mini_batch_size: PositiveInt | None = None
    ppo_micro_batch_size_per_gpu: PositiveInt | None = None
    ppo_epochs: PositiveInt | None = None
    cliprange_value: NonNegativeFloat = CriticSettings.cliprange_value
    grad_clip: NonNegativeFloat = UpdateSettings.grad_clip
    loss_agg_mode: LossAggMode | None = None
    loss_scale_factor: PositiveFloat | None = None
    ulysses_sequence_parallel_size: int = 1
