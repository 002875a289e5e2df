"""verl's ``actor_rollout_ref`` and ``critic`` sections, typed: the policy model, its update,
its rollout engines and its reference copy; the value model and its update. The groups of
``agentfly fit`` beside :mod:`agentfly.config.schema`'s ``agent`` and ``algorithm`` (whose
docstring lists the defaults that depart from verl's, on purpose).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from jsonargparse.typing import (
    ClosedUnitInterval,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    restricted_number_type,
)

from agentfly.models.attention import ATTENTION
from agentfly.modules.loss_modes import LOSS_AGG_MODES
from agentfly.modules.settings import (
    CRITIC_LR,
    LORA_EXPORTS,
    CriticSettings,
    FSDPSettings,
    KLSettings,
    LoraSettings,
    ModelSettings,
    OptimizerSettings,
    PolicyLossSettings,
    UpdateSettings,
)

#: a fraction in (0, 1]: a nucleus mass, a share of GPU memory
UnitFraction = restricted_number_type("UnitFraction", float, [(">", 0), ("<=", 1)])
#: a finite amount > 0: a memory budget
PositiveFiniteFloat = restricted_number_type(
    "PositiveFiniteFloat", float, [(">", 0), ("<", float("inf"))]
)
LossAggMode = Literal[LOSS_AGG_MODES]  # type: ignore[valid-type]


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


#: verl's ``fsdp_config.model_dtype`` words (its ``PrecisionType``) → torch's dtype names
MODEL_DTYPES = {
    "fp32": "float32", "float32": "float32",
    "bf16": "bfloat16", "bfloat16": "bfloat16",
    "fp16": "float16", "float16": "float16",
}


@dataclass
class FSDPConfig:
    """FSDP sharding and offloading (used when the strategy is ``fsdp``), and the model's dtype.

    Attributes:
        param_offload: keep parameters on CPU between uses.
        optimizer_offload: keep optimizer state on CPU.
        reshard_after_forward: free gathered parameters after the forward pass.
        fsdp_size: shard group size; ``-1`` = all ranks.
        model_dtype: the dtype this model's parameters are loaded (and, for the actor and the
            critic, trained and kept in optimizer state) in: ``fp32``, ``bf16`` or ``fp16``
            (torch's names too); ``None`` = ``fp32``, verl's default. Under every strategy, not
            only ``fsdp`` (verl's FSDP workers' ``from_pretrained(torch_dtype=...)``). A
            ``*-true`` ``trainer.precision`` converts every model to its own dtype after
            loading, so a different ``model_dtype`` beside it is refused.
    """

    param_offload: bool = FSDPSettings.offload
    optimizer_offload: bool = FSDPSettings.offload
    reshard_after_forward: bool = FSDPSettings.reshard_after_forward
    fsdp_size: int = FSDPSettings.size
    model_dtype: Literal[tuple(MODEL_DTYPES)] | None = None  # type: ignore[valid-type]


@dataclass
class PolicyLossConfig:
    """The policy loss (verl's ``actor.policy_loss``; the losses are in
    :mod:`agentfly.modules.policy_losses`).

    Attributes:
        loss_mode: a registered policy loss, verl's names: ``vanilla`` (PPO's clipped surrogate
            with the dual clip), ``gspo``, ``cispo``, ``sapo``, ``gpg``, ``clip_cov``, ``kl_cov``,
            ``geo_mean``, ``dro``, ``dppo_tv``, ``dppo_kl``, ``bypass_mode`` (needs
            ``algorithm.rollout_correction.bypass_mode``, which it turns on when that is null);
            or a ``module:attr`` of the user's.
        clip_cov_ratio: ``clip_cov``: the share of a micro-batch's tokens whose gradient is cut.
        clip_cov_lb: ``clip_cov``: the lower bound of a cut token's covariance.
        clip_cov_ub: ``clip_cov``: its upper bound.
        kl_cov_ratio: ``kl_cov``: the share of a micro-batch's tokens that get the KL penalty.
        ppo_kl_coef: ``kl_cov``: the penalty's coefficient.
        dro_beta: ``dro``: the quadratic log-ratio penalty's coefficient; required by ``dro``.
    """

    loss_mode: str = PolicyLossSettings.loss_mode
    clip_cov_ratio: PositiveFloat = PolicyLossSettings.clip_cov_ratio
    clip_cov_lb: float = PolicyLossSettings.clip_cov_lb
    clip_cov_ub: float = PolicyLossSettings.clip_cov_ub
    kl_cov_ratio: PositiveFloat = PolicyLossSettings.kl_cov_ratio
    ppo_kl_coef: NonNegativeFloat = PolicyLossSettings.ppo_kl_coef
    dro_beta: PositiveFloat | None = PolicyLossSettings.dro_beta


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
        use_dynamic_bsz: form the update's micro-batches by real tokens instead of trajectories
            (at most ``ppo_max_token_len_per_gpu`` each, a longer trajectory alone; first-fit
            decreasing, :mod:`agentfly.modules.micro_batches`); ``ppo_micro_batch_size_per_gpu``
            is then unused. Also the default of the rollout's, the reference's and the critic's
            ``*use_dynamic_bsz``.
        ppo_max_token_len_per_gpu: that budget, prompt and response tokens per micro-batch on one
            device; also the default of the rollout's and the reference's
            ``log_prob_max_token_len_per_gpu``.
        ppo_epochs: passes over each rollout batch.
        shuffle: draw each PPO epoch's mini-batches from a fresh (seeded) permutation of the
            rollout's trajectories instead of in rollout order.
        clip_ratio: PPO clip range ε.
        clip_ratio_low: lower clip range; ``None`` = ``clip_ratio`` (``dppo_*``: the divergence
            bound where the advantage is not positive).
        clip_ratio_high: upper clip range; ``None`` = ``clip_ratio`` (DAPO's clip-higher;
            ``dppo_*``: the divergence bound where the advantage is positive).
        clip_ratio_c: dual-clip constant (Ye et al., 2020) for negative advantages (``dppo_*``:
            the cap on the detached ratio).
        loss_agg_mode: how token losses become one (:func:`agentfly.modules.losses.agg_loss`).
        loss_scale_factor: the constant ``seq-mean-token-sum-norm`` divides by (Dr. GRPO's
            MAX_TOKENS); ``None`` = ``actor_rollout_ref.rollout.response_length``.
        grad_clip: max gradient norm.
        use_kl_loss: add a KL-to-reference term to the loss.
        kl_loss_coef: its coefficient.
        kl_loss_type: its estimator (``kl``, ``abs``, ``mse``, ``low_var_kl``, ``full``...).
        entropy_coeff: entropy bonus coefficient.
        tau_pos: ``sapo``'s gate temperature where the advantage is positive.
        tau_neg: ``sapo``'s gate temperature elsewhere.
        policy_loss: the policy loss (``loss_mode``) and the settings of some losses.
        ulysses_sequence_parallel_size: sequence-parallel degree; only 1 (sequence parallelism
            is not implemented, a larger value is refused).
        optim: the optimizer.
        fsdp_config: FSDP settings.
    """

    strategy: Literal["auto", "ddp", "fsdp"] = "auto"
    ppo_mini_batch_size: PositiveInt = 256
    ppo_micro_batch_size_per_gpu: PositiveInt | None = None
    use_dynamic_bsz: bool = False
    ppo_max_token_len_per_gpu: PositiveInt = 16384
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
    tau_pos: PositiveFloat = PolicyLossSettings.tau_pos
    tau_neg: PositiveFloat = PolicyLossSettings.tau_neg
    policy_loss: PolicyLossConfig = field(default_factory=PolicyLossConfig)
    ulysses_sequence_parallel_size: int = 1
    optim: OptimConfig = field(default_factory=OptimConfig)
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)


@dataclass
class LoraConfig:
    """A LoRA adapter on the policy (peft): only the adapter trains, the reference is the base
    with the adapter switched off, checkpoints hold the adapter and its optimizer state. verl's
    FSDP spellings ``model.lora_rank``, ``model.lora_alpha`` and ``model.target_modules`` are this
    group's ``rank``, ``alpha`` and ``target_modules``.

    Attributes:
        rank: the adapter's rank; 0 = no adapter (the whole model trains).
        alpha: LoRA's alpha: the update is scaled by ``alpha / rank``.
        target_modules: the layers that get an adapter: ``all-linear`` (every linear layer but
            the output head) or a list of module names (``[q_proj, v_proj]``).
        merge: send the engines the merged weights (``W + alpha / rank · B A``, the base model's
            names) after each update instead of the adapter; an engine that cannot take an
            adapter (one of the user's) always gets them.
        export: what ``hf_actor/`` holds at the end: ``merged`` (a plain model) or ``adapter``
            (peft's adapter files, for ``PeftModel.from_pretrained`` over the base).
    """

    rank: NonNegativeInt = LoraSettings.rank
    alpha: PositiveFloat = LoraSettings.alpha
    target_modules: str | list[str] = LoraSettings.target_modules  # type: ignore[assignment]
    merge: bool = LoraSettings.merge
    export: Literal[LORA_EXPORTS] = LoraSettings.export  # type: ignore[valid-type]


@dataclass
class OverrideConfig:
    """verl's ``override_config``: what the trainer's model is loaded with, beside its checkpoint.

    Attributes:
        attn_implementation: the attention its forward passes run (None: the model's own
            choice, ``sdpa`` run as ``agentfly_sdpa``): ``eager``, ``sdpa``, ``agentfly_sdpa``
            (sdpa with grouped K/V kept grouped on CPU and packed rows attended row by row),
            ``flash_attention_2``/``_3`` (the flash-attn package, CUDA), ``flex_attention``
            (no backward on CPU). The rollout engines keep their own.
    """

    attn_implementation: Literal[ATTENTION] | None = None  # type: ignore[valid-type]


@dataclass
class ModelConfig:
    """The policy model (shared by actor, rollout engines and reference).

    Attributes:
        path: HF model id or local path (``agent.init_config.model_name_or_path`` is a spelling of it).
        use_remove_padding: the actor's and the reference's forward passes run each
            micro-batch's trajectories packed into one sequence without padding
            (:mod:`agentfly.modules.packing`: row by row under ``agentfly_sdpa``, flash
            attention's varlen kernel under ``flash_attention_2``, transformers' block-diagonal
            mask under ``sdpa``, ``eager`` and ``flex_attention``). Skips the shared-prompt KV
            reuse of the padded path.
        enable_gradient_checkpointing: recompute activations in the backward pass.
        enable_activation_offload: keep the update's saved activations on the CPU (GPU runs).
        trust_remote_code: let Hugging Face run model and tokenizer code shipped with the
            checkpoint (actor, reference, critic, engines).
        lora: a LoRA adapter on the actor (off at ``rank`` 0).
        override_config: what the actor and the reference are loaded with (their attention).
        use_fused_kernels: the actor's and the reference's log-probabilities and entropies are
            computed from the final hidden states and the LM head a chunk of tokens at a time,
            forward and backward, never holding the (B, T, V) logits
            (:mod:`agentfly.modules.linear_logprobs`; verl's key, its fused kernels in plain
            PyTorch). The same values up to float rounding, one more LM-head pass per update.
            Not with a full-vocabulary KL, FSDP, or a head whose logits are not ``h Wᵀ``.
    """

    path: str | None = None
    use_remove_padding: bool = False
    use_fused_kernels: bool = False
    enable_gradient_checkpointing: bool = UpdateSettings.gradient_checkpointing
    enable_activation_offload: bool = UpdateSettings.activation_offload
    trust_remote_code: bool = ModelSettings.trust_remote_code
    lora: LoraConfig = field(default_factory=LoraConfig)
    override_config: OverrideConfig = field(default_factory=OverrideConfig)


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


#: the engines that take ``enable_prefix_caching`` (``actor_rollout_ref.rollout.enable_prefix_caching``)
PREFIX_CACHING_ENGINES = ("transformers", "vllm")


@dataclass
class CheckpointEngineConfig:
    """The weight sync from the trainer to the engines (verl's ``rollout.checkpoint_engine``).

    Attributes:
        update_weights_bucket_megabytes: the most MiB of weights one update request carries: the
            actor's state is sent to engines in Ray actors in buckets of at most this size (a
            tensor larger than a bucket goes alone), each put in Ray's object store and handed to
            every engine before the next, and an engine loads the weights once the last bucket
            is in. An engine in the training process (``num_engines=0``) takes the weights in
            place, so nothing is sent.
    """

    update_weights_bucket_megabytes: PositiveInt = 2048


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
        log_prob_use_dynamic_bsz: the rollout-time log-prob pass's micro-batches by real tokens
            (``log_prob_max_token_len_per_gpu`` each); ``None`` = ``actor.use_dynamic_bsz``.
        log_prob_max_token_len_per_gpu: that budget; ``None`` = ``actor.ppo_max_token_len_per_gpu``.
        num_engines: engines in the pool (Ray actors); 0 = one engine in the training process,
            no Ray; ``None`` resolves to what the machine holds: on GPUs
            ``max(1, n_gpus_per_node * nnodes // tensor_model_parallel_size)``; on the CPU 0
            for ``hf`` engines and one training process on one node without ``RAY_ADDRESS``,
            else 1 (see :mod:`agentfly.run.topology`).
        dtype: engine weights dtype on GPUs; engines on the CPU run in float32, as training does.
        enforce_eager: no CUDA graphs: vLLM without graphs and compilation, the
            ``transformers`` engine on its dynamic K/V cache (``False``: its static K/V slots,
            the one-token step captured as a CUDA graph on a GPU, run eagerly on the CPU);
            ``None`` = vLLM's CUDA graphs on GPUs, and the ``transformers`` engine's dynamic
            cache on every device (its static path is not the default until measured on a GPU).
        enable_prefix_caching: the engines keep the KV cache of the sequences they generate, so
            a chain's next turn prefills only its new tokens (the ``transformers`` and ``vllm``
            engines; cleared whenever new weights arrive).
        prefix_cache_max_gib: the most the ``transformers`` engine's prefix cache may keep, in
            GiB (least recently used blocks go first; freed during the update when the engine
            shares the trainer's device and the rollout is ``sync``). vLLM's prefix cache lives
            in its KV cache, sized by ``gpu_memory_utilization``.
        val_kwargs: sampling during validation.
        checkpoint_engine: how the actor's weights travel to the engines after an update.

    verl's ``rollout.n`` (samples per prompt) is a spelling of ``agent.run_config.num_chains`` and
    ``rollout.prompt_length`` one of ``data.max_prompt_length`` (:mod:`agentfly.config.aliases`).
    """

    name: str = "transformers"
    temperature: NonNegativeFloat = ModelSettings.temperature
    top_p: UnitFraction = 1.0
    top_k: int = -1
    response_length: PositiveInt = 512
    gpu_memory_utilization: UnitFraction = 0.5
    tensor_model_parallel_size: PositiveInt = 1
    log_prob_micro_batch_size_per_gpu: PositiveInt | None = None
    log_prob_use_dynamic_bsz: bool | None = None
    log_prob_max_token_len_per_gpu: PositiveInt | None = None
    num_engines: NonNegativeInt | None = None
    dtype: Literal["bfloat16", "float16", "float32", "auto"] = "bfloat16"
    enforce_eager: bool | None = None
    enable_prefix_caching: bool = True
    prefix_cache_max_gib: PositiveFiniteFloat = 2.0
    val_kwargs: SamplingConfig = field(default_factory=SamplingConfig)
    checkpoint_engine: CheckpointEngineConfig = field(default_factory=CheckpointEngineConfig)


@dataclass
class RefConfig:
    """The frozen reference policy (used when a KL term is on).

    Attributes:
        fsdp_config: how FSDP shards the reference (``param_offload``,
            ``reshard_after_forward``, ``fsdp_size``); ``optimizer_offload`` is refused (the
            reference has no optimizer).
        log_prob_micro_batch_size_per_gpu: trajectories per forward on one device;
            ``None`` = the actor's micro-batch.
        log_prob_use_dynamic_bsz: the reference pass's micro-batches by real tokens
            (``log_prob_max_token_len_per_gpu`` each); ``None`` = ``actor.use_dynamic_bsz``.
        log_prob_max_token_len_per_gpu: that budget; ``None`` = ``actor.ppo_max_token_len_per_gpu``.
        ulysses_sequence_parallel_size: sequence-parallel degree (defaults to the actor's).
    """

    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)
    log_prob_micro_batch_size_per_gpu: PositiveInt | None = None
    log_prob_use_dynamic_bsz: bool | None = None
    log_prob_max_token_len_per_gpu: PositiveInt | None = None
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
        use_remove_padding: the critic's forward passes run packed, without padding (see the
            actor model's).
        fsdp_config: how FSDP shards the critic, and its ``model_dtype`` (AgentFly's verl spells
            it ``critic.fsdp``).
        override_config: what the critic is loaded with (its attention; the actor's keys).
    """

    path: str | None = None
    enable_gradient_checkpointing: bool = True
    enable_activation_offload: bool = UpdateSettings.activation_offload
    use_remove_padding: bool = False
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)
    override_config: OverrideConfig = field(default_factory=OverrideConfig)


@dataclass
class CriticConfig:
    """The value function (used only by estimators that need one, e.g. ``gae``).

    Attributes:
        model: the value model.
        optim: its optimizer (lr 1e-5 as in verl).
        ppo_mini_batch_size: trajectories per critic step (defaults to the actor's).
        ppo_micro_batch_size_per_gpu: trajectories per forward/backward on one device.
        use_dynamic_bsz: the critic's micro-batches (update and values pass) by real tokens;
            ``None`` = ``actor_rollout_ref.actor.use_dynamic_bsz``.
        ppo_max_token_len_per_gpu: the update's budget, tokens per micro-batch on one device.
        forward_max_token_len_per_gpu: the values pass's budget; ``None`` =
            ``ppo_max_token_len_per_gpu``.
        ppo_epochs: passes per rollout batch (defaults to the actor's).
        cliprange_value: value clipping range.
        grad_clip: max gradient norm.
        loss_agg_mode: loss aggregation (defaults to the actor's).
        loss_scale_factor: ``seq-mean-token-sum-norm``'s constant (defaults to the actor's).
        ulysses_sequence_parallel_size: sequence-parallel degree; only 1 (see the actor's).
        enable: whether a critic is trained (verl's ``critic.enable``); ``None`` = when the
            estimator needs one (``gae``). ``True`` beside an estimator that reads no values
            (``grpo``...) and ``False`` beside one that does are refused: the estimator decides.
    """

    model: CriticModelConfig = field(default_factory=CriticModelConfig)
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=CRITIC_LR))
    ppo_mini_batch_size: PositiveInt | None = None
    ppo_micro_batch_size_per_gpu: PositiveInt | None = None
    use_dynamic_bsz: bool | None = None
    ppo_max_token_len_per_gpu: PositiveInt = 32768
    forward_max_token_len_per_gpu: PositiveInt | None = None
    ppo_epochs: PositiveInt | None = None
    cliprange_value: NonNegativeFloat = CriticSettings.cliprange_value
    grad_clip: NonNegativeFloat = UpdateSettings.grad_clip
    loss_agg_mode: LossAggMode | None = None
    loss_scale_factor: PositiveFloat | None = None
    ulysses_sequence_parallel_size: int = 1
    enable: bool | None = None
