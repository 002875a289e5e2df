"""The LightningModule: actor, frozen reference, critic; PPO updates with manual optimisation.

One ``training_step`` is one RL iteration on a :class:`~agentfly.core.batch.RolloutBatch`: reference
log-probabilities (only when a KL term is on), critic values (only when the estimator needs a
critic), old log-probabilities (only when an update reuses the rollout: several PPO epochs or
mini-batches, or a KL penalty in the reward; or when ``rollout_rs`` rejects), then the rollout-batch callbacks (KL shaping,
advantages: the module's ``rollout_callbacks``, run by
:func:`~agentfly.callbacks.batch_hooks.apply_rollout_callbacks`), then the updates.
One loop (:meth:`AgentRLModule._update`) serves the critic and the actor: ``epochs`` passes over
mini-batches, accumulating micro-batches, one optimizer step per mini-batch. The actor's loss is
the clipped policy loss + ``kl_loss_coef`` × KL − ``entropy_coeff`` × entropy; the critic
minimises the clipped value loss with its own epochs, mini- and micro-batches, gradient clip,
loss aggregation, optimizer and schedule (the ``critic_*`` arguments; each defaults to the
actor's). Rollout is not done here.

Departure from verl: with one epoch and one mini-batch the old log-probabilities are the current
ones detached (the ratio is exactly 1 at the only step), so the extra forward pass is skipped.

Off-policy correction (:mod:`agentfly.modules.rollout_correction`; verl's
``algorithm.rollout_correction``), off by default. The engine's log-probabilities
(``rollout_log_probs``) are the behaviour policy; the actor's before the update (``old_log_probs``,
or in the skipped case above the current ones detached) are the proximal policy. ``rollout_is``
multiplies each token's policy loss by the truncated weight π_prox/π_behav; ``rollout_rs``
removes tokens or chains whose weight exceeds its bound from the actor's loss (every term, and
their denominators) after the advantages are computed over every sampled token (verl rejects
before the advantages: a rejected last token would then drop its chain's reward from GAE);
``bypass_mode`` makes the engine's log-probabilities PPO's old policy (no pass recomputes them).
Whenever the batch carries the engine's log-probabilities, their gap to the actor's is logged.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import lightning.pytorch as pl
import torch

from agentfly.callbacks.batch_hooks import RolloutBatchCallback, apply_rollout_callbacks
from agentfly.core import metric_sums
from agentfly.core.batch import RolloutBatch
from agentfly.core.ranks import fail_together
from agentfly.core.reductions import masked_mean
from agentfly.estimators.kl import full_kl_from_logits, kl_penalty
from agentfly.modules.fsdp import total_norm
from agentfly.modules.losses import (
    agg_loss,
    agg_norms,
    entropy_from_logits,
    logprobs_from_logits,
    policy_loss,
    value_loss,
)
from agentfly.modules.response_logits import response_logits
from agentfly.modules.rollout_correction import IS_LEVELS, importance_weights, logprob_gap
from agentfly.modules.schedule import lr_multiplier

# Losses computed with the mini-batch's normalisers: each micro-batch holds a share of the
# mini-batch's value, so they add up within a mini-batch (and average over mini-batches).
ADDITIVE_METRICS = ("actor/pg_loss", "actor/kl_loss", "critic/vf_loss")


def _reduce(name: str, values: list[float]) -> float:
    """A metric over an update's micro-batches: ``.../max`` the largest, ``.../min`` the smallest,
    any other the mean."""
    if name.endswith("/max"):
        return max(values)
    if name.endswith("/min"):
        return min(values)
    return sum(values) / len(values)


# A micro-batch's loss: (micro-batch, loss_agg_mode, the mini-batch's normalisers) -> the loss to
# back-propagate and its metrics.
LossFn = Callable[[RolloutBatch, str, dict[str, Any]], tuple[torch.Tensor, dict[str, float]]]


@dataclass(frozen=True)
class UpdateSettings:
    """How one model is updated on a rollout batch (the actor's or the critic's settings).

    Attributes:
        name: the metrics' prefix (``actor``, ``critic``).
        epochs: passes over the batch.
        mini_batch_size: trajectories per optimizer step.
        micro_batch_size: trajectories per forward/backward (None: the mini-batch).
        grad_clip: max gradient norm.
        loss_agg_mode: see :func:`agentfly.modules.losses.agg_loss`.
        loss_scale_factor: ``seq-mean-token-sum-norm``'s constant (None: the padded length).
        activation_offload: keep saved activations on the CPU during the backward pass.
    """

    name: str
    epochs: int
    mini_batch_size: int
    micro_batch_size: int | None
    grad_clip: float
    loss_agg_mode: str
    loss_scale_factor: float | None
    activation_offload: bool


class AgentRLModule(pl.LightningModule):
    """Holds the models and the losses.

    Args:
        model_path: the actor (and reference) checkpoint.
        critic_path: the critic's checkpoint; None when the estimator needs no critic.
        use_reference: load a frozen reference model (a KL term is on).
        use_kl_in_reward: the batch hooks need ``old_log_probs`` and ``ref_log_probs``.
        kl_penalty: the reward's KL estimator; ``full`` (with ``use_kl_in_reward``) also gives
            the batch hooks ``full_kl`` (:meth:`full_kl_to_reference`).
        lr, betas, weight_decay: AdamW for the actor.
        lr_warmup_steps: linear warm-up length in optimizer steps (0: none).
        warmup_style, min_lr_ratio, num_cycles, lr_decay_steps: the schedule after warm-up
            (:func:`agentfly.modules.schedule.lr_multiplier`; ``lr_decay_steps`` = the run's
            optimizer steps, the cosine horizon).
        grad_clip: max gradient norm of the actor.
        ppo_epochs: passes over each rollout batch.
        ppo_mini_batch_size: trajectories per optimizer step on this rank.
        micro_batch_size: trajectories per forward/backward.
        shuffle: each epoch's mini-batches from a fresh permutation (seeded by ``seed``,
            the iteration and the epoch) instead of in rollout order.
        seed: seed of those permutations.
        clip_ratio_low, clip_ratio_high, clip_ratio_c: PPO and dual clip.
        loss_agg_mode: see :func:`agentfly.modules.losses.agg_loss`.
        loss_scale_factor: ``seq-mean-token-sum-norm``'s constant (None: the padded length).
        entropy_coeff: entropy bonus.
        use_kl_loss, kl_loss_coef, kl_loss_type: KL-to-reference term in the loss.
        log_prob_micro_batch_size: trajectories per forward of the rollout-time log-prob pass
            (None: ``micro_batch_size``).
        ref_log_prob_micro_batch_size: the same for the reference's pass.
        cliprange_value: value clip.
        critic_warmup: iterations that update only the critic.
        critic_lr, critic_betas, critic_weight_decay, critic_lr_warmup_steps,
        critic_warmup_style, critic_min_lr_ratio, critic_num_cycles, critic_lr_decay_steps,
        critic_grad_clip, critic_ppo_epochs, critic_ppo_mini_batch_size, critic_micro_batch_size,
        critic_loss_agg_mode, critic_loss_scale_factor: the critic's optimizer, schedule and
            update (None: the actor's value).
        temperature: the rollout temperature (log-probabilities use logits / temperature).
        rollout_is: truncated importance sampling of the behaviour policy, per ``token`` or per
            ``sequence``; None: off.
        rollout_is_threshold: its cap C.
        rollout_rs: rejection (masking) of tokens (``token``) or whole chains (``sequence``)
            whose weight exceeds ``rollout_rs_threshold``; None: off. Needs the old log-probabilities
            before the update, so their pass runs whenever it is on.
        rollout_rs_threshold: its bound (None: ``rollout_is_threshold``).
        bypass_mode: the engine's log-probabilities are PPO's old log-probabilities (the ratio
            and the clip are π_θ/π_behav); refused with ``rollout_is`` or ``rollout_rs``, whose
            weight would be 1 on every token.
        gradient_checkpointing: trade compute for memory in the actor.
        critic_gradient_checkpointing: the same for the critic (None: the actor's).
        activation_offload, critic_activation_offload: keep saved activations on the CPU during
            the update's backward pass (``torch.autograd.graph.save_on_cpu``; CUDA only).
        trust_remote_code: let Hugging Face run model code shipped with the checkpoints.
        fsdp_offload, fsdp_reshard_after_forward, fsdp_size: FSDP2 settings of the actor, used
            when the strategy provides a device mesh (``actor.strategy=fsdp``; see
            :mod:`agentfly.modules.fsdp`).
        ref_fsdp_offload, ref_fsdp_reshard_after_forward, ref_fsdp_size: the reference's.
        critic_fsdp_offload, critic_fsdp_reshard_after_forward, critic_fsdp_size: the critic's
            (None: the actor's).
        dtype: parameter dtype of the models.
        total_training_steps: RL iterations to run (for the scheduler and the stop).
    """

    def __init__(
        self,
        model_path: str,
        *,
        critic_path: str | None = None,
        use_reference: bool = False,
        use_kl_in_reward: bool = False,
        kl_penalty: str = "kl",
        lr: float = 1e-6,
        betas: tuple[float, float] = (0.9, 0.999),
        weight_decay: float = 0.01,
        lr_warmup_steps: int = 0,
        warmup_style: str = "constant",
        min_lr_ratio: float = 0.0,
        num_cycles: float = 0.5,
        lr_decay_steps: int = 1,
        grad_clip: float = 1.0,
        ppo_epochs: int = 1,
        ppo_mini_batch_size: int = 256,
        micro_batch_size: int | None = None,
        shuffle: bool = False,
        seed: int = 0,
        clip_ratio_low: float = 0.2,
        clip_ratio_high: float = 0.2,
        clip_ratio_c: float = 3.0,
        loss_agg_mode: str = "token-mean",
        loss_scale_factor: float | None = None,
        entropy_coeff: float = 0.0,
        use_kl_loss: bool = False,
        kl_loss_coef: float = 0.001,
        kl_loss_type: str = "low_var_kl",
        log_prob_micro_batch_size: int | None = None,
        ref_log_prob_micro_batch_size: int | None = None,
        cliprange_value: float = 0.5,
        critic_warmup: int = 0,
        critic_lr: float = 1e-5,
        critic_betas: tuple[float, float] | None = None,
        critic_weight_decay: float | None = None,
        critic_lr_warmup_steps: int = 0,
        critic_warmup_style: str = "constant",
        critic_min_lr_ratio: float = 0.0,
        critic_num_cycles: float = 0.5,
        critic_lr_decay_steps: int | None = None,
        critic_grad_clip: float | None = None,
        critic_ppo_epochs: int | None = None,
        critic_ppo_mini_batch_size: int | None = None,
        critic_micro_batch_size: int | None = None,
        critic_loss_agg_mode: str | None = None,
        critic_loss_scale_factor: float | None = None,
        temperature: float = 1.0,
        rollout_is: str | None = None,
        rollout_is_threshold: float = 2.0,
        rollout_rs: str | None = None,
        rollout_rs_threshold: float | None = None,
        bypass_mode: bool = False,
        gradient_checkpointing: bool = False,
        critic_gradient_checkpointing: bool | None = None,
        activation_offload: bool = False,
        critic_activation_offload: bool = False,
        trust_remote_code: bool = False,
        fsdp_offload: bool = False,
        fsdp_reshard_after_forward: bool = True,
        fsdp_size: int = -1,
        ref_fsdp_offload: bool | None = None,
        ref_fsdp_reshard_after_forward: bool | None = None,
        ref_fsdp_size: int | None = None,
        critic_fsdp_offload: bool | None = None,
        critic_fsdp_reshard_after_forward: bool | None = None,
        critic_fsdp_size: int | None = None,
        dtype: str = "float32",
        total_training_steps: int = 1,
    ) -> None:
        super().__init__()
        for name, level in (("rollout_is", rollout_is), ("rollout_rs", rollout_rs)):
            if level is not None and level not in IS_LEVELS:
                raise ValueError(f"{name}={level!r} is not one of: None, {', '.join(IS_LEVELS)}")
            if level is not None and bypass_mode:
                raise ValueError(
                    f"{name}={level!r} with bypass_mode=True: the engine's log-probabilities are "
                    "then the old policy, so the weight π_old/π_engine is 1 on every token"
                )
        self.save_hyperparameters()
        self.automatic_optimization = False
        self.actor: Any = None
        self.reference: Any = None
        self.critic: Any = None
        self.iteration = 0  # RL iterations done (checkpointed)
        # the trainer's RolloutBatchCallbacks, each added by its own Lightning `setup` hook
        self.rollout_callbacks: list[RolloutBatchCallback] = []
        # which actor weights these are, for the engines (not checkpointed): 0 is the model as
        # loaded from model_path; each actor update and each checkpoint load moves it on
        self.weights_version = 0
        # the policy's version for the rollout side (checkpointed): actor updates done so far;
        # the engines' samples carry the version they were generated with (staleness)
        self.policy_version = 0
        # optimizer steps taken so far by the running `_update`: at 0 the weights are still those
        # the batch arrived with (the proximal policy)
        self._stepped = 0

    def _critic_setting(self, name: str) -> Any:
        """``critic_<name>``, or the actor's ``<name>`` when it is None."""
        value = self.hparams[f"critic_{name}"]
        return self.hparams[name] if value is None else value

    # ------------------------------------------------------------------ models

    def configure_model(self) -> None:
        if self.actor is not None:
            return
        from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForTokenClassification

        from agentfly.models.attention import use_grouped_sdpa

        h = self.hparams
        load = {"dtype": getattr(torch, h.dtype), "trust_remote_code": h.trust_remote_code}

        def policy_model() -> Any:
            # sdpa -> agentfly_sdpa: the same attention, without copying grouped K/V on CPU
            return use_grouped_sdpa(AutoModelForCausalLM.from_pretrained(h.model_path, **load))

        self.actor = policy_model().train()
        if h.gradient_checkpointing:
            self.actor.gradient_checkpointing_enable()
        if h.use_reference:
            self.reference = policy_model().eval()
            self.reference.requires_grad_(False)
        if h.critic_path:
            # no dropout on the value head (transformers defaults it to 0.1), as in verl: values
            # at rollout time and in the update are the same function of the weights
            config = AutoConfig.from_pretrained(
                h.critic_path, num_labels=1, trust_remote_code=h.trust_remote_code
            )
            config.classifier_dropout = 0.0
            self.critic = use_grouped_sdpa(
                AutoModelForTokenClassification.from_pretrained(
                    h.critic_path, config=config, **load
                )
            ).train()
            if self._critic_setting("gradient_checkpointing"):
                self.critic.gradient_checkpointing_enable()
        if self._device_mesh is not None:  # ModelParallelStrategy: FSDP2, each model on its own
            from agentfly.modules.fsdp import shard_mesh, shard_model

            for model, prefix in ((self.actor, ""), (self.reference, "ref_"), (self.critic, "critic_")):
                if model is None:
                    continue
                own = {k: h[f"{prefix}fsdp_{k}"] for k in ("offload", "reshard_after_forward", "size")}
                own = {k: (h[f"fsdp_{k}"] if v is None else v) for k, v in own.items()}
                shard_model(
                    model, shard_mesh(self._device_mesh, own["size"]),
                    offload=own["offload"], reshard_after_forward=own["reshard_after_forward"],
                )

    def configure_optimizers(self) -> Any:
        h = self.hparams
        actor_opt = torch.optim.AdamW(self.actor.parameters(), lr=h.lr, betas=tuple(h.betas), weight_decay=h.weight_decay)
        actor_sched = torch.optim.lr_scheduler.LambdaLR(
            actor_opt,
            lr_multiplier(h.lr_warmup_steps, h.warmup_style, h.lr_decay_steps, h.min_lr_ratio, h.num_cycles),
        )
        if self.critic is None:
            return [actor_opt], [actor_sched]
        critic = self._critic_setting
        critic_opt = torch.optim.AdamW(
            self.critic.parameters(), lr=h.critic_lr, betas=tuple(critic("betas")), weight_decay=critic("weight_decay")
        )
        critic_sched = torch.optim.lr_scheduler.LambdaLR(
            critic_opt,
            lr_multiplier(
                h.critic_lr_warmup_steps, h.critic_warmup_style, critic("lr_decay_steps"),
                h.critic_min_lr_ratio, h.critic_num_cycles,
            ),
        )
        return [actor_opt, critic_opt], [actor_sched, critic_sched]

    # ------------------------------------------------------------------ forward passes

    def _response_logits(self, model: Any, batch: RolloutBatch) -> torch.Tensor:
        """Logits at the positions that predict response tokens, / temperature. (B, T, V).

        Only response positions reach the LM head, and chains sharing a prompt encode it once
        (:mod:`agentfly.modules.response_logits`)."""
        logits = response_logits(
            model, batch.input_ids, batch.attention_mask, batch.position_ids,
            batch.prompt_length, batch.response_length,
        ).float()  # (B, T, V); no copy in fp32
        temperature = self.hparams.temperature
        return logits if temperature == 1.0 else logits / temperature

    def log_probs(self, model: Any, batch: RolloutBatch) -> torch.Tensor:
        """Log-probabilities of the response tokens. Shape: (B, T)."""
        return logprobs_from_logits(self._response_logits(model, batch), batch.responses)

    def values(self, batch: RolloutBatch) -> torch.Tensor:
        """Critic values at the positions that predict response tokens. (B, T)."""
        p, t = batch.prompt_length, batch.response_length
        out = self.critic(**batch.model_inputs()).logits  # (B, P + T, 1)
        return out[:, p - 1 : p - 1 + t, 0].float()

    @torch.no_grad()
    def full_kl_to_reference(
        self, batch: RolloutBatch
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The rollout-time actor's (old policy's) and the reference's log-probabilities of the
        responses, and the full-vocabulary KL(old ‖ ref) per response position, Σ_v p(v)(log p(v)
        − log q(v)): one forward of each model per micro-batch, only that micro-batch's logits
        held. Returns ``(old_log_probs, ref_log_probs, full_kl)``, each (B, T)."""
        old, ref, full = [], [], []
        h = self.hparams
        for micro in batch.split(h.log_prob_micro_batch_size or h.micro_batch_size):
            logits = self._response_logits(self.actor, micro)  # (b, T, V)
            ref_logits = self._response_logits(self.reference, micro)  # (b, T, V)
            old.append(logprobs_from_logits(logits, micro.responses))
            ref.append(logprobs_from_logits(ref_logits, micro.responses))
            full.append(full_kl_from_logits(logits, ref_logits))
            del logits, ref_logits
        return torch.cat(old), torch.cat(ref), torch.cat(full)

    @torch.no_grad()
    def _no_grad_pass(
        self, fn: Callable[[RolloutBatch], torch.Tensor], batch: RolloutBatch, chunk: int | None
    ) -> torch.Tensor:
        return torch.cat([fn(micro) for micro in batch.split(chunk)])

    def _saved_activations(self, offload: bool) -> Any:
        """Where the backward pass keeps activations: on the CPU when offloading on a GPU."""
        if offload and self.device.type == "cuda":
            return torch.autograd.graph.save_on_cpu(pin_memory=True)
        return contextlib.nullcontext()

    # ------------------------------------------------------------------ one RL iteration

    def _reuses_rollout(self, batch_size: int) -> bool:
        h = self.hparams
        return h.ppo_epochs > 1 or batch_size > h.ppo_mini_batch_size or h.use_kl_in_reward

    def training_step(self, batch: RolloutBatch, batch_idx: int) -> None:
        h = self.hparams
        size = len(batch)
        metrics: dict[str, float] = {}
        clock = time.perf_counter
        if h.use_kl_in_reward and h.kl_penalty == "full":
            start = clock()
            batch.old_log_probs, batch.ref_log_probs, batch.full_kl = self.full_kl_to_reference(batch)
            metrics["timing/reference_s"] = clock() - start
        if h.bypass_mode:  # the engine's log-probabilities are the old ones: nothing to recompute
            batch.old_log_probs = self._behaviour(batch)
        # rejection decides what leaves the loss before the first step: it needs them up front
        needs_old = self._reuses_rollout(size) or h.rollout_rs is not None
        if needs_old and batch.old_log_probs is None:
            start = clock()
            chunk = h.log_prob_micro_batch_size or h.micro_batch_size
            batch.old_log_probs = self._no_grad_pass(lambda b: self.log_probs(self.actor, b), batch, chunk)
            metrics["timing/old_log_prob_s"] = clock() - start
        needs_ref = h.use_kl_in_reward or h.kl_loss_type != "full"
        if self.reference is not None and needs_ref and batch.ref_log_probs is None:
            start = clock()
            chunk = h.ref_log_prob_micro_batch_size or h.micro_batch_size
            batch.ref_log_probs = self._no_grad_pass(lambda b: self.log_probs(self.reference, b), batch, chunk)
            metrics["timing/reference_s"] = clock() - start
        if self.critic is not None:
            start = clock()
            batch.values = self._no_grad_pass(self.values, batch, self._critic_setting("micro_batch_size"))
            metrics["timing/critic_values_s"] = clock() - start
        metrics.update(batch.rollout_metrics)  # the rollout's own (reward, tools, timing)
        hooks = apply_rollout_callbacks(self.rollout_callbacks, self.trainer, self, batch)
        metrics.update(hooks)  # shaped rewards, advantages
        actor_batch = batch
        if h.rollout_rs is not None:
            actor_batch, rejected = self._reject(batch)
            metrics.update(rejected)

        optimizers = self.optimizers()
        optimizers = optimizers if isinstance(optimizers, list) else [optimizers]
        schedulers = self.lr_schedulers()
        schedulers = schedulers if isinstance(schedulers, list) else [schedulers]
        if self.critic is not None:
            start = clock()
            critic = (self.critic, self._critic_settings(), self._critic_loss)
            metrics.update(self._update(*critic, batch, optimizers[1], schedulers[1]))
            metrics["timing/critic_update_s"] = clock() - start
        if self.iteration >= h.critic_warmup:
            start = clock()
            actor = (self.actor, self._actor_settings(), self._actor_loss)
            metrics.update(self._update(*actor, actor_batch, optimizers[0], schedulers[0]))
            metrics["timing/update_s"] = clock() - start
            self.weights_version += 1  # on every rank alike: the engines' sync gathers collectively
            self.policy_version += 1
        metrics.update(self._batch_metrics(batch))
        self.iteration += 1
        metrics["training/iteration"] = float(self.iteration)
        shown = {"reward": "critic/score/mean", "kl": "actor/kl_loss", "entropy": "actor/entropy"}
        bar = {k: metrics[v] for k, v in shown.items() if v in metrics}
        self.log_dict(bar, on_step=True, prog_bar=True, logger=False, batch_size=size)
        self.log_dict(metrics, on_step=True, prog_bar=False, batch_size=size)

    def _minibatches(self, size: int, mini_batch_size: int, epoch: int) -> list[torch.Tensor]:
        """One epoch's mini-batches of row indices: in rollout order, or a seeded permutation."""
        order = torch.arange(size)
        if self.hparams.shuffle:
            seed = self.hparams.seed * 1_000_003 + self.iteration * 1009 + epoch
            order = torch.randperm(size, generator=torch.Generator().manual_seed(seed))
        return list(order.to(self.device).split(min(mini_batch_size, size)))

    def _actor_settings(self) -> UpdateSettings:
        h = self.hparams
        return UpdateSettings(
            "actor", h.ppo_epochs, h.ppo_mini_batch_size, h.micro_batch_size, h.grad_clip,
            h.loss_agg_mode, h.loss_scale_factor, h.activation_offload,
        )

    def _critic_settings(self) -> UpdateSettings:
        critic = self._critic_setting
        return UpdateSettings(
            "critic", critic("ppo_epochs"), critic("ppo_mini_batch_size"),
            critic("micro_batch_size"), critic("grad_clip"), critic("loss_agg_mode"),
            critic("loss_scale_factor"), self.hparams.critic_activation_offload,
        )

    def _update(
        self, model: Any, s: UpdateSettings, loss_fn: LossFn, batch: RolloutBatch, opt: Any,
        scheduler: Any,
    ) -> dict[str, float]:
        """``s.epochs`` passes over ``batch`` in mini-batches, one optimizer step each, their
        micro-batches' gradients accumulated. Returns the metrics averaged over the steps (an
        additive loss summed over a mini-batch's micro-batches first; ``.../max`` and ``.../min``
        their largest and smallest)."""
        sums: dict[str, list[float]] = {}
        self._stepped = 0
        for epoch in range(s.epochs):
            for rows in self._minibatches(len(batch), s.mini_batch_size, epoch):
                mini = batch.select(rows)
                norms = agg_norms(s.loss_agg_mode, mini.response_mask, s.loss_scale_factor)
                opt.zero_grad()
                parts: dict[str, float] = {}
                for micro in mini.split(s.micro_batch_size):
                    with self._saved_activations(s.activation_offload):
                        loss, losses = loss_fn(micro, s.loss_agg_mode, norms)
                        self.manual_backward(loss)
                    for k, v in losses.items():
                        if k in ADDITIVE_METRICS:
                            parts[k] = parts.get(k, 0.0) + v
                        else:
                            sums.setdefault(k, []).append(v)
                for k, v in parts.items():  # the mini-batch's loss: the sum of its micro-batch shares
                    sums.setdefault(k, []).append(v)
                grad_norm = total_norm(torch.nn.utils.clip_grad_norm_(model.parameters(), s.grad_clip))
                sums.setdefault(f"{s.name}/grad_norm", []).append(float(grad_norm))
                if math.isfinite(float(grad_norm)):
                    opt.step()
                scheduler.step()
                self._stepped += 1
        out = {k: _reduce(k, v) for k, v in sums.items()}
        out[f"{s.name}/lr"] = float(scheduler.get_last_lr()[0])
        return out

    def _actor_loss(
        self, micro: RolloutBatch, mode: str, norms: dict[str, Any]
    ) -> tuple[torch.Tensor, dict[str, float]]:
        h = self.hparams
        mask = micro.response_mask
        # entropy is logged either way; it joins the graph only when the bonus uses it
        logits = self._response_logits(self.actor, micro)  # (B, T, V)
        logp = logprobs_from_logits(logits, micro.responses)
        if h.entropy_coeff:
            entropy = entropy_from_logits(logits)
        else:
            with torch.no_grad():
                entropy = entropy_from_logits(logits.detach())
        full = None  # the full-vocabulary KL from these logits, when the loss uses it
        if h.use_kl_loss and h.kl_loss_type == "full":
            with torch.no_grad():
                ref_logits = self._response_logits(self.reference, micro)  # (B, T, V)
            full = full_kl_from_logits(logits, ref_logits)
            del ref_logits
        del logits
        old = logp.detach() if micro.old_log_probs is None else micro.old_log_probs
        assert micro.advantages is not None
        weights, out = self._correction(micro, logp)
        pg, pg_metrics = policy_loss(
            old, logp, micro.advantages, mask, h.clip_ratio_low, h.clip_ratio_high, h.clip_ratio_c,
            mode, weights=weights, **norms,
        )
        loss = pg
        out["actor/pg_loss"] = float(pg.detach())
        out.update({f"actor/{k}": float(v) for k, v in pg_metrics.items()})
        ent = agg_loss(entropy, mask, mode, **norms)
        out["actor/entropy"] = float(masked_mean(entropy.detach(), mask))
        if h.entropy_coeff:
            loss = loss - h.entropy_coeff * ent
        if h.use_kl_loss:
            if full is not None:
                kl = full
            else:
                if micro.ref_log_probs is None:
                    raise ValueError("use_kl_loss needs the reference (use_reference=True)")
                kl = kl_penalty(logp, micro.ref_log_probs, h.kl_loss_type)
            kl_loss = agg_loss(kl, mask, mode, **norms)
            loss = loss + h.kl_loss_coef * kl_loss
            out["actor/kl_loss"] = float(kl_loss.detach())
            out["actor/kl_coef"] = h.kl_loss_coef
        return loss, out

    def _correction(
        self, micro: RolloutBatch, logp: torch.Tensor
    ) -> tuple[torch.Tensor | None, dict[str, float]]:
        """The behaviour weights of a micro-batch's policy loss (``rollout_is``; None when off)
        and the metrics of the engine's log-probabilities against the actor's.

        The proximal policy is ``old_log_probs`` when a pass computed them; otherwise no step
        has been taken yet (one epoch, one mini-batch), so the current log-probabilities,
        detached, are the proximal policy's: no extra forward pass is needed."""
        h = self.hparams
        out: dict[str, float] = {}
        fresh = self._stepped == 0  # the actor still has the weights the batch arrived with
        own_old = micro.old_log_probs is not None and not h.bypass_mode  # computed by the actor
        weights = None
        if h.rollout_is is not None:
            if micro.old_log_probs is None and not fresh:
                raise RuntimeError("rollout_is needs the old log-probabilities once a step is taken")
            proximal = logp.detach() if micro.old_log_probs is None else micro.old_log_probs
            weights, _, m = importance_weights(
                proximal, self._behaviour(micro), micro.response_mask, h.rollout_is, "truncate",
                h.rollout_is_threshold,
            )
            out.update({f"actor/is_weight/{k}": float(v) for k, v in m.items()})
        if micro.rollout_log_probs is not None and fresh and not own_old:  # else per batch
            gap = logprob_gap(logp.detach(), micro.rollout_log_probs, micro.response_mask)
            out.update({f"rollout/logprob_gap/{k}": float(v) for k, v in gap.items()})
        return weights, out

    def _reject(self, batch: RolloutBatch) -> tuple[RolloutBatch, dict[str, float]]:
        """The batch the actor trains on under ``rollout_rs``: its ``response_mask`` without the
        tokens (or chains) whose weight π_old/π_behav exceeds the bound. The advantages are
        already computed; the critic and the logged batch metrics keep every sampled token."""
        h = self.hparams
        assert batch.old_log_probs is not None
        bound = h.rollout_is_threshold if h.rollout_rs_threshold is None else h.rollout_rs_threshold
        _, keep, m = importance_weights(
            batch.old_log_probs, self._behaviour(batch), batch.response_mask, h.rollout_rs, "mask",
            bound,
        )
        metrics = {f"actor/rejected/{k}": float(v) for k, v in m.items() if "masked" in k}
        return dataclasses.replace(batch, response_mask=keep), metrics

    @staticmethod
    def _behaviour(batch: RolloutBatch) -> torch.Tensor:
        """The engine's log-probabilities of the sampled tokens (the behaviour policy)."""
        if batch.rollout_log_probs is None:
            raise ValueError(
                "the off-policy correction (rollout_is, rollout_rs, bypass_mode) needs the "
                "engine's log-probabilities, and this batch has no rollout_log_probs"
            )
        return batch.rollout_log_probs

    def _critic_loss(
        self, micro: RolloutBatch, mode: str, norms: dict[str, Any]
    ) -> tuple[torch.Tensor, dict[str, float]]:
        assert micro.values is not None and micro.returns is not None
        loss, m = value_loss(
            self.values(micro), micro.values, micro.returns, micro.response_mask,
            self.hparams.cliprange_value, mode, **norms,
        )
        return loss, {"critic/vf_loss": float(loss.detach()), "critic/vf_clipfrac": float(m["vf_clipfrac"])}

    def _batch_metrics(self, batch: RolloutBatch) -> dict[str, float]:
        mask = batch.response_mask
        scores = batch.token_level_scores.sum(-1)
        out = {
            "critic/score/mean": float(scores.mean()),
            "critic/score/max": float(scores.max()),
            "critic/score/min": float(scores.min()),
            "response_length/mean": float(mask.sum(-1).mean()),
        }
        if batch.ref_log_probs is not None and batch.old_log_probs is not None:
            out["actor/kl_to_ref"] = float(masked_mean(batch.old_log_probs - batch.ref_log_probs, mask))
        own_old = batch.old_log_probs is not None and not self.hparams.bypass_mode
        if batch.rollout_log_probs is not None and own_old:  # else in the loss (_correction)
            gap = logprob_gap(batch.old_log_probs, batch.rollout_log_probs, mask)
            out.update({f"rollout/logprob_gap/{k}": float(v) for k, v in gap.items()})
        return out

    # ------------------------------------------------------------------ validation / checkpoint

    def on_validation_epoch_start(self) -> None:
        self._val_sums: metric_sums.Sums = {}
        self._val_error: Exception | None = None

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        """Validation batches are scored rollouts: the data module hands over ``val_sums``, the
        [sum, count] per metric (:mod:`agentfly.core.metric_sums`), or with several ranks the
        error that stopped the batch (``val_error``, raised at the epoch's end on every rank)."""
        if batch.get("val_error") is not None and getattr(self, "_val_error", None) is None:
            self._val_error = batch["val_error"]
        metric_sums.merge([batch.get("val_sums", {})], into=self._val_sums)

    def on_validation_epoch_end(self) -> None:
        """Add every rank's sums and counts (each rank validated its own rows), then log the means;
        a validation rollout that failed on any rank stops every rank here."""
        parts = [dict(getattr(self, "_val_sums", {}))]
        if self.trainer.world_size > 1 and torch.distributed.is_available() and torch.distributed.is_initialized():
            fail_together(getattr(self, "_val_error", None), f"the validation at iteration {self.iteration}")
            gathered: list[Any] = [None] * torch.distributed.get_world_size()
            torch.distributed.all_gather_object(gathered, parts[0])
            parts = gathered
        metrics = metric_sums.means(parts)
        if metrics:
            self.log_dict(metrics, on_step=False, on_epoch=True, sync_dist=False)
        self._val_sums = {}

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["agentfly_iteration"] = self.iteration
        checkpoint["agentfly_policy_version"] = self.policy_version

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.configure_model()
        self.iteration = int(checkpoint.get("agentfly_iteration", 0))
        self.policy_version = int(checkpoint.get("agentfly_policy_version", self.iteration))
        self.weights_version += 1  # the checkpoint's weights replace the ones the engines may hold
