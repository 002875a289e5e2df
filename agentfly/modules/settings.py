"""What :class:`~agentfly.modules.rl_module.AgentRLModule` is told: a few typed groups of settings.

:func:`agentfly.run.module_plan.plan_module` builds each group once from the composed config (per-rank
batch sizes, optimizer steps, the loss constant that defaults to the response budget); tests and
users build them by hand. A field's default here is the setting's only default: the config
schema (:mod:`agentfly.config.schema`, :mod:`agentfly.config.schema_actor_critic`) takes its
defaults from these classes wherever a key is passed on unchanged. The module reads each field as
it is: no field stands for another when unset, but where its docstring says so.

The classes are torch-free, so the config layer imports them in milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

#: the levels of an importance weight: per token, or the chain's product on each of its tokens
CORRECTION_LEVELS = ("token", "sequence")
#: the ``bypass_mode`` policy loss's loss types (verl's ``rollout_correction.loss_type``)
BYPASS_LOSS_TYPES = ("ppo_clip", "reinforce")


#: where a LoRA run's Hugging Face export (``hf_actor/``) puts the adapter
LORA_EXPORTS = ("merged", "adapter")


@dataclass(frozen=True)
class LoraSettings:
    """A LoRA adapter on the policy (Hu et al., 2021, through peft; verl's keys and meanings).

    The base weights are frozen and only the adapter trains; the reference is the base with the
    adapter switched off (:mod:`agentfly.modules.lora`).

    Attributes:
        rank: the adapter's rank r; 0: no adapter, the whole model trains.
        alpha: the scaling numerator: the update is ``alpha / rank · B A``.
        target_modules: peft's ``target_modules``: ``all-linear`` (every linear layer but the
            output head) or module names (``[q_proj, v_proj]``).
        merge: the engines receive the merged weights ``W + alpha / rank · B A`` under the base
            model's names instead of the adapter (an engine that cannot take an adapter always
            does).
        export: what the Hugging Face export at the end holds: ``merged`` (the base model with
            the adapter merged in, loadable as a plain model) or ``adapter`` (peft's
            ``adapter_config.json`` and ``adapter_model.safetensors``).

    Raises:
        ValueError: a negative rank, a non-positive alpha, no target modules, or an unknown export.
    """

    rank: int = 0
    alpha: float = 16.0
    target_modules: str | tuple[str, ...] = "all-linear"
    merge: bool = False
    export: str = "merged"

    def __post_init__(self) -> None:
        if self.rank < 0:
            raise ValueError(f"lora rank={self.rank} must be >= 0 (0: no adapter)")
        if self.alpha <= 0:
            raise ValueError(f"lora alpha={self.alpha} must be > 0")
        if not self.target_modules:
            raise ValueError("lora target_modules is empty: name modules, or all-linear")
        if self.export not in LORA_EXPORTS:
            raise ValueError(f"lora export={self.export!r} is not one of: {', '.join(LORA_EXPORTS)}")

    @property
    def enabled(self) -> bool:
        return self.rank > 0


@dataclass(frozen=True)
class ModelSettings:
    """The policy model (the actor, and the reference when a KL term is on).

    Attributes:
        path: its checkpoint (a Hugging Face id or a local folder).
        trust_remote_code: let Hugging Face run model code shipped with the checkpoints.
        dtype: the actor's parameter dtype as loaded (``float32``, ``bfloat16``, ``float16``;
            ``actor_rollout_ref.actor.fsdp_config.model_dtype``).
        reference_dtype: the reference's (``actor_rollout_ref.ref.fsdp_config.model_dtype``;
            with LoRA the reference is the actor's base, in ``dtype``).
        temperature: the rollout temperature: log-probabilities, entropies and KLs are those of
            ``softmax(logits / temperature)``, the distribution the engines sampled from.
        lora: a LoRA adapter on the actor (off at rank 0); with one, the reference is the base
            model with the adapter switched off, not a second copy.
        remove_padding: the actor's and the reference's forward passes run each micro-batch's
            rows packed into one sequence, without padding (:mod:`agentfly.modules.packing`).
        attn_implementation: the attention the actor and the reference are loaded with (one of
            :data:`agentfly.models.attention.ATTENTION`); None: the model's own choice, ``sdpa``
            run as ``agentfly_sdpa``.
        fused_logprobs: the actor's and the reference's log-probabilities and entropies come
            from the final hidden states and the LM head in chunks of tokens, never the (B, T, V)
            logits (:mod:`agentfly.modules.linear_logprobs`).
    """

    path: str
    trust_remote_code: bool = False
    dtype: str = "float32"
    reference_dtype: str = "float32"
    temperature: float = 1.0
    lora: LoraSettings = LoraSettings()
    remove_padding: bool = False
    attn_implementation: str | None = None
    fused_logprobs: bool = False


@dataclass(frozen=True)
class UpdateSettings:
    """How one model (the actor or the critic) is updated on a rollout batch.

    Attributes:
        name: the metrics' prefix (``actor``, ``critic``).
        mini_batch_size: trajectories per optimizer step on this rank.
        micro_batch_size: trajectories per forward/backward (None: the mini-batch).
        forward_micro_batch_size: trajectories per forward of the no-grad pass before the update
            (the actor's old log-probabilities, the critic's values; None: ``micro_batch_size``).
        epochs: passes over the batch.
        shuffle_seed: None: each epoch's mini-batches in rollout order; an int: from a fresh
            permutation seeded by it, the iteration and the epoch.
        grad_clip: max gradient norm.
        loss_agg_mode: see :func:`agentfly.modules.losses.agg_loss`.
        loss_scale_factor: ``seq-mean-token-sum-norm``'s constant (None: the padded length).
        gradient_checkpointing: recompute activations in the backward pass.
        activation_offload: keep saved activations on the CPU during the backward pass (CUDA).
        max_token_len: the update's micro-batches by real tokens (prompt and response) instead
            of rows: at most this many each, a longer row alone
            (:mod:`agentfly.modules.micro_batches`); None: ``micro_batch_size`` rows.
        forward_max_token_len: the same for the no-grad pass before the update; None: by rows
            (``forward_micro_batch_size``).
    """

    name: str
    mini_batch_size: int
    micro_batch_size: int | None = None
    forward_micro_batch_size: int | None = None
    epochs: int = 1
    shuffle_seed: int | None = None
    grad_clip: float = 1.0
    loss_agg_mode: str = "token-mean"
    loss_scale_factor: float | None = None
    gradient_checkpointing: bool = False
    activation_offload: bool = False
    max_token_len: int | None = None
    forward_max_token_len: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_token_len", "forward_max_token_len"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{self.name} {name}={value} must be > 0 (None: by rows)")

    @property
    def pass_micro_batch_size(self) -> int | None:
        """Trajectories per forward of the no-grad pass."""
        return self.forward_micro_batch_size or self.micro_batch_size


@dataclass(frozen=True)
class OptimizerSettings:
    """AdamW and its learning-rate schedule (:func:`agentfly.modules.schedule.lr_multiplier`).

    Attributes:
        lr: peak learning rate.
        betas: AdamW betas.
        weight_decay: AdamW weight decay.
        warmup_style: ``constant`` or ``cosine`` after warm-up.
        min_lr_ratio: floor of the cosine schedule, as a fraction of ``lr``.
        num_cycles: cosine cycles over ``decay_steps``.
        warmup_steps: linear warm-up length in optimizer steps (0: none).
        decay_steps: the run's optimizer steps, the cosine horizon.
    """

    lr: float = 1e-6
    betas: tuple[float, float] = (0.9, 0.999)
    weight_decay: float = 0.01
    warmup_style: Literal["constant", "cosine"] = "constant"
    min_lr_ratio: float = 0.0
    num_cycles: float = 0.5
    warmup_steps: int = 0
    decay_steps: int = 1


#: the critic's learning rate when none is given (verl's)
CRITIC_LR = 1e-5


@dataclass(frozen=True)
class PolicyLossSettings:
    """The actor's objective besides the KL term; a policy loss receives it as ``config`` and
    reads the fields of its own (:mod:`agentfly.modules.policy_losses`; verl's keys and defaults).

    Attributes:
        loss_mode: the policy loss, a name in :data:`agentfly.modules.losses.POLICY_LOSSES`
            (``vanilla``: PPO's clipped surrogate with the dual clip) or a ``module:attr``.
        clip_ratio_low: PPO's lower clip range ε_low (DPPO's lower divergence bound).
        clip_ratio_high: PPO's upper clip range ε_high (DAPO's clip-higher when above ε_low;
            DPPO's upper divergence bound).
        clip_ratio_c: the dual-clip constant (Ye et al., 2020) for negative advantages (DPPO's
            cap on its detached ratio).
        entropy_coeff: the entropy bonus's coefficient (AgentFly's training guide's default).
        clip_cov_ratio: ``clip_cov``: the share of the batch's tokens whose gradient is cut.
        clip_cov_lb: ``clip_cov``: a cut token's covariance is above this...
        clip_cov_ub: ...and below this.
        kl_cov_ratio: ``kl_cov``: the share of the batch's tokens (largest covariance first)
            that get the |log-ratio| penalty.
        ppo_kl_coef: ``kl_cov``: that penalty's coefficient.
        dro_beta: ``dro``: the quadratic log-ratio penalty's β; required (> 0) by ``dro``.
        tau_pos: ``sapo``: the gate's temperature for positive advantages.
        tau_neg: ``sapo``: the gate's temperature for the others.
        rollout_correction: the off-policy correction the ``bypass_mode`` loss applies itself
            (verl's ``policy_loss.rollout_correction``); the module sets it to its own
            ``correction``, as verl's trainer copies ``algorithm.rollout_correction`` there.
            None: ``CorrectionSettings()``.
    """

    loss_mode: str = "vanilla"
    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.2
    clip_ratio_c: float = 3.0
    entropy_coeff: float = 0.001
    clip_cov_ratio: float = 0.0002
    clip_cov_lb: float = 1.0
    clip_cov_ub: float = 5.0
    kl_cov_ratio: float = 0.0002
    ppo_kl_coef: float = 0.1
    dro_beta: float | None = None
    tau_pos: float = 1.0
    tau_neg: float = 1.05
    rollout_correction: CorrectionSettings | None = None


@dataclass(frozen=True)
class KLSettings:
    """The KL to the frozen reference: a term of the actor's loss, a penalty in the reward, or both.
    The reference is loaded when either is on.

    Attributes:
        use_kl_loss: add ``kl_loss_coef`` × KL(actor ‖ reference) to the actor's loss (on by
            AgentFly's training guide's default).
        kl_loss_coef: its coefficient.
        kl_loss_type: its estimator (``kl``, ``abs``, ``mse``, ``low_var_kl``, ``full``...).
        use_kl_in_reward: the batch hooks shape the reward with KL(old ‖ reference): the module
            computes ``old_log_probs`` and ``ref_log_probs`` for them.
        kl_penalty: the reward's estimator; ``full`` also gives the hooks ``full_kl``.
        reference_micro_batch_size: trajectories per forward of the reference's no-grad pass
            (None: the actor's micro-batch).
        reference_max_token_len: that pass's micro-batches by real tokens instead (None: by
            rows).
    """

    use_kl_loss: bool = True
    kl_loss_coef: float = 0.001
    kl_loss_type: str = "low_var_kl"
    use_kl_in_reward: bool = False
    kl_penalty: str = "kl"
    reference_micro_batch_size: int | None = None
    reference_max_token_len: int | None = None

    @property
    def needs_reference(self) -> bool:
        return self.use_kl_loss or self.use_kl_in_reward


@dataclass(frozen=True)
class CorrectionSettings:
    """Off-policy correction between the engine that sampled the tokens (the behaviour policy)
    and the actor before the update (:mod:`agentfly.modules.rollout_correction`); off by default.

    Attributes:
        rollout_is: importance weights per ``token`` or per ``sequence``; None: off.
        rollout_is_threshold: a number C: truncated (TIS), ``min(w, C)``; ``"lower_upper"``
            (``"0.5_5.0"``): IcePop, ``w · 1{lower ≤ w ≤ upper}`` (:attr:`is_mode`).
        rollout_rs: rejection (masking) of the tokens (``token``) or whole chains
            (``sequence``) whose weight leaves the band :attr:`rejection_bound`; None: off.
        rollout_rs_threshold: that band: a number C is ``[1/C, C]``, ``"lower_upper"`` its two
            bounds; None: ``rollout_is_threshold``'s.
        bypass_mode: the engine's log-probabilities are PPO's old log-probabilities (the ratio
            and the clip are π_θ/π_behav). ``rollout_is`` and ``rollout_rs`` then weigh π_θ
            against π_behav inside the ``bypass_mode`` policy loss, and are refused with any
            other (:func:`agentfly.modules.off_policy.check`): π_old/π_behav would be 1.
        loss_type: the ``bypass_mode`` policy loss's: ``ppo_clip`` (PPO's clipped loss, the
            weights only logged) or ``reinforce`` (``-w·A·log π_θ``).

    Raises:
        ValueError: an unknown level or loss type, or a threshold :func:`threshold_bounds`
            refuses.
    """

    rollout_is: Literal["token", "sequence"] | None = None
    rollout_is_threshold: float | str = 2.0
    rollout_rs: Literal["token", "sequence"] | None = None
    rollout_rs_threshold: float | str | None = None
    bypass_mode: bool = False
    loss_type: Literal["ppo_clip", "reinforce"] = "ppo_clip"

    def __post_init__(self) -> None:
        for name in ("rollout_is", "rollout_rs"):
            level = getattr(self, name)
            if level is not None and level not in CORRECTION_LEVELS:
                raise ValueError(f"{name}={level!r} is not one of: None, {', '.join(CORRECTION_LEVELS)}")
        if self.loss_type not in BYPASS_LOSS_TYPES:
            raise ValueError(f"loss_type={self.loss_type!r} is not one of: {', '.join(BYPASS_LOSS_TYPES)}")
        for name in ("rollout_is_threshold", "rollout_rs_threshold"):
            if getattr(self, name) is not None:
                threshold_bounds(getattr(self, name), name)

    @property
    def is_mode(self) -> Literal["truncate", "icepop"]:
        """``rollout_is``'s weights: ``truncate`` (TIS) for a number, ``icepop`` for a band."""
        lower, _ = threshold_bounds(self.rollout_is_threshold, "rollout_is_threshold")
        return "truncate" if lower is None else "icepop"

    @property
    def rejection_bound(self) -> float | str:
        """``rollout_rs``'s band as spelled: ``rollout_rs_threshold``, else ``rollout_is_threshold``
        (a number C is ``[1/C, C]``, verl's ``*_k1``)."""
        return self.rollout_is_threshold if self.rollout_rs_threshold is None else self.rollout_rs_threshold


def threshold_bounds(spec: float | str, name: str = "threshold") -> tuple[float | None, float]:
    """verl's spelling of an importance-weight threshold as ``(lower, upper)``: a number (or a
    numeric string) is an upper bound alone (lower None), ``"lower_upper"`` both (``"0.5_5.0"``;
    write each with its decimal point or quote it: ``0.5_5`` reads as the number 0.55 in YAML and
    on the command line, as in verl).

    Raises:
        ValueError: naming ``name``: not a number nor two joined by ``_``, a bound not > 0, or
            ``lower > upper``.
    """
    if isinstance(spec, bool) or not isinstance(spec, int | float | str):
        raise ValueError(f"{name}={spec!r}: a number or 'lower_upper' (e.g. '0.5_5.0')")
    text = str(spec).strip()
    parts = text.split("_", 1) if isinstance(spec, str) else [text]
    try:
        bounds = [float(p) for p in parts]
    except ValueError:
        raise ValueError(f"{name}={spec!r}: a number or 'lower_upper' (e.g. '0.5_5.0')") from None
    if any(not b > 0 for b in bounds):  # not NaN either
        raise ValueError(f"{name}={spec!r}: every bound must be > 0")
    if len(bounds) == 1:
        return None, bounds[0]
    if bounds[0] > bounds[1]:
        raise ValueError(f"{name}={spec!r}: the lower bound exceeds the upper one")
    return bounds[0], bounds[1]


@dataclass(frozen=True)
class CriticSettings:
    """The value model, trained beside the actor when the advantage estimator needs values.

    Attributes:
        path: its checkpoint (a token-classification head with one label is put on it).
        update: how it is updated (its own epochs, mini- and micro-batches, loss aggregation).
        optim: its optimizer.
        cliprange_value: how far a value may move from the rollout's before the loss clips it.
        warmup_iterations: iterations that update only the critic.
        dtype: its parameter dtype as loaded (``critic.model.fsdp_config.model_dtype``).
        remove_padding: its forward passes run each micro-batch's rows packed, without padding.
        attn_implementation: the attention it is loaded with (as :class:`ModelSettings`').
    """

    path: str
    update: UpdateSettings
    optim: OptimizerSettings = field(default_factory=lambda: OptimizerSettings(lr=CRITIC_LR))
    cliprange_value: float = 0.5
    warmup_iterations: int = 0
    dtype: str = "float32"
    remove_padding: bool = False
    attn_implementation: str | None = None


@dataclass(frozen=True)
class FSDPSettings:
    """How FSDP2 shards one model, when the strategy provides a device mesh (``strategy=fsdp``;
    :mod:`agentfly.modules.fsdp`).

    Attributes:
        offload: keep parameters (and the optimizer state with them) on the CPU between uses.
        reshard_after_forward: free the gathered parameters after the forward pass.
        size: the shard group's size; -1: all ranks.
    """

    offload: bool = False
    reshard_after_forward: bool = True
    size: int = -1


@dataclass(frozen=True)
class ShardingSettings:
    """Each model's :class:`FSDPSettings`."""

    actor: FSDPSettings = FSDPSettings()
    reference: FSDPSettings = FSDPSettings()
    critic: FSDPSettings = FSDPSettings()
