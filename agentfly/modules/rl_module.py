"""The LightningModule: actor, frozen reference, critic; PPO updates with manual optimisation.

One ``training_step`` is one RL iteration on a :class:`~agentfly.core.batch.RolloutBatch`: reference
log-probabilities (only when a KL term is on), critic values (only when the estimator needs a
critic), old log-probabilities (only when an update reuses the rollout: several PPO epochs or
mini-batches, or a KL penalty in the reward; or when ``rollout_rs`` rejects), then the
rollout-batch callbacks (the module's ``rollout_callbacks``: the reward's shaping, then the
advantages; :mod:`agentfly.core.batch_hooks`), then the updates.
One loop (:meth:`AgentRLModule._update`) serves the critic and the actor: ``epochs`` passes over
mini-batches, accumulating micro-batches (of ``micro_batch_size`` rows, or by a token budget:
:mod:`agentfly.modules.micro_batches`), one optimizer step per mini-batch. The actor's loss is
the clipped policy loss + ``kl_loss_coef`` × KL − ``entropy_coeff`` × entropy; the critic
minimises the clipped value loss with its own update and optimizer settings
(:class:`~agentfly.modules.settings.CriticSettings`). The settings arrive as typed groups
(:mod:`agentfly.modules.settings`), built once by the run's plan. Rollout is not done here; the
off-policy correction (verl's ``algorithm.rollout_correction``) is :mod:`agentfly.modules.off_policy`.

Departure from verl: with one epoch and one mini-batch the old log-probabilities are the current
ones detached (the ratio is exactly 1 at the only step), so the extra forward pass is skipped.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from typing import Any

import lightning.pytorch as pl
import torch

from agentfly.core import metric_sums
from agentfly.core.batch import RolloutBatch
from agentfly.core.batch_hooks import RolloutBatchHook, compute_advantages, shape_rewards
from agentfly.core.reductions import masked_mean
from agentfly.core.step_metrics import StepMetrics
from agentfly.estimators.kl import full_kl_from_logits, kl_penalty
from agentfly.modules import off_policy
from agentfly.modules.fsdp import total_norm
from agentfly.modules.linear_logprobs import (
    check_fused_head,
    hidden_instead_of_logits,
    linear_logprobs,
)
from agentfly.modules.lora import drop_frozen_base, reference_of, restore_frozen_base
from agentfly.modules.losses import (
    agg_loss,
    agg_norms,
    entropy_from_logits,
    logprobs_from_logits,
    value_loss,
)
from agentfly.modules.micro_batches import per_row, split
from agentfly.modules.packing import packed_values
from agentfly.modules.policy_losses import get_policy_loss
from agentfly.modules.policy_model import (
    build_critic_model,
    build_optimizer,
    build_policy_model,
    build_trainable_policy,
)
from agentfly.modules.response_logits import batch_response_logits
from agentfly.modules.settings import (
    CorrectionSettings,
    CriticSettings,
    KLSettings,
    ModelSettings,
    OptimizerSettings,
    PolicyLossSettings,
    ShardingSettings,
    UpdateSettings,
)

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


class AgentRLModule(pl.LightningModule):
    """Holds the models and the losses.

    Args:
        model: the policy model (actor and reference), its dtype and sampling temperature.
        actor: how the actor is updated.
        actor_optim: the actor's optimizer and schedule.
        policy_loss: the actor's objective besides the KL term.
        kl: the KL to the reference (in the loss, in the reward); it loads the reference.
        correction: the off-policy correction against the engine's log-probabilities.
        critic: the value model, its update and optimizer; None when the estimator needs no
            critic.
        fsdp: FSDP2 settings per model, used when the strategy provides a device mesh.
    """

    def __init__(
        self,
        model: ModelSettings,
        *,
        actor: UpdateSettings,
        actor_optim: OptimizerSettings = OptimizerSettings(),
        policy_loss: PolicyLossSettings = PolicyLossSettings(),
        kl: KLSettings = KLSettings(),
        correction: CorrectionSettings = CorrectionSettings(),
        critic: CriticSettings | None = None,
        fsdp: ShardingSettings = ShardingSettings(),
    ) -> None:
        super().__init__()
        self.model_settings = model
        self.actor_settings = actor
        self.actor_optim = actor_optim
        off_policy.check(correction, policy_loss.loss_mode)
        # what the loss reads as `config`: `bypass_mode`'s correction is the module's
        self.policy_loss_settings = replace(policy_loss, rollout_correction=correction)
        # the registered policy loss that policy_loss.loss_mode names, resolved once
        self.policy_loss_fn = get_policy_loss(policy_loss.loss_mode)
        self.kl = kl
        self.correction = correction
        self.critic_settings = critic
        self.fsdp = fsdp
        # logged and checkpointed as plain values (a checkpoint holds no agentfly class)
        self.save_hyperparameters({
            "model": asdict(model), "actor": asdict(actor), "actor_optim": asdict(actor_optim),
            "policy_loss": asdict(policy_loss), "kl": asdict(kl), "correction": asdict(correction),
            "critic": None if critic is None else asdict(critic), "fsdp": asdict(fsdp),
        })
        self.automatic_optimization = False
        self.actor: Any = None
        self.reference: Any = None
        self.critic: Any = None
        self.iteration = 0  # RL iterations done (checkpointed)
        self._step_metrics = StepMetrics()
        # the rollout-batch hooks: each of the trainer's RolloutBatchCallbacks adds itself in `setup`
        self.rollout_callbacks: list[RolloutBatchHook] = []
        # which actor weights these are, for the engines (not checkpointed): 0 is the model as
        # loaded from its path; each actor update and each checkpoint load moves it on
        self.weights_version = 0
        # the policy's version for the rollout side (checkpointed): actor updates done so far;
        # the engines' samples carry the version they were generated with (staleness)
        self.policy_version = 0
        # optimizer steps taken so far by the running `_update`: at 0 the weights are still those
        # the batch arrived with (the proximal policy)
        self._stepped = 0

    # ------------------------------------------------------------------ models

    def configure_model(self) -> None:
        if self.actor is not None:
            return
        m = self.model_settings
        self.actor = build_trainable_policy(m, self.actor_settings.gradient_checkpointing)
        if m.fused_logprobs:
            check_fused_head(self.actor, m.path)
        if self.kl.needs_reference and not m.lora.enabled:  # with LoRA: the base, adapter off
            self.reference = build_policy_model(m, m.reference_dtype).eval()
            self.reference.requires_grad_(False)
        if self.critic_settings is not None:
            self.critic = build_critic_model(self.critic_settings, m)
        if self._device_mesh is not None:  # ModelParallelStrategy: FSDP2, each model on its own
            from agentfly.modules.fsdp import shard_mesh, shard_model

            fsdp = self.fsdp
            for model, own in ((self.actor, fsdp.actor), (self.reference, fsdp.reference), (self.critic, fsdp.critic)):
                if model is not None:
                    shard_model(
                        model, shard_mesh(self._device_mesh, own.size), offload=own.offload,
                        reshard_after_forward=own.reshard_after_forward,
                    )

    def configure_optimizers(self) -> Any:
        actor_opt, actor_sched = build_optimizer(self.actor, self.actor_optim)
        if self.critic is None:
            return [actor_opt], [actor_sched]
        assert self.critic_settings is not None
        critic_opt, critic_sched = build_optimizer(self.critic, self.critic_settings.optim)
        return [actor_opt, critic_opt], [actor_sched, critic_sched]

    # ------------------------------------------------------------------ forward passes

    def _response_logits(self, model: Any, batch: RolloutBatch) -> torch.Tensor:
        """Logits at the positions that predict response tokens, / temperature. (B, T, V).

        Only response positions reach the LM head, and chains sharing a prompt encode it once
        (:func:`~agentfly.modules.response_logits.batch_response_logits`: packed rows with
        ``remove_padding``, a whole forward for rows with images)."""
        m = self.model_settings
        logits = batch_response_logits(model, batch, remove_padding=m.remove_padding).float()  # no copy in fp32
        return logits if m.temperature == 1.0 else logits / m.temperature

    def _fused_log_probs(self, model: Any, batch: RolloutBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """``use_fused_kernels``: the log-probabilities and entropies of :meth:`_response_logits`'
        distribution, from the same positions' hidden states and the LM head a chunk of tokens at
        a time (:mod:`agentfly.modules.linear_logprobs`). Each (B, T)."""
        m = self.model_settings
        with hidden_instead_of_logits(model) as weight:
            hidden = batch_response_logits(model, batch, remove_padding=m.remove_padding)  # (B, T, H)
        return linear_logprobs(hidden, weight, batch.responses, temperature=m.temperature)

    def log_probs(self, model: Any, batch: RolloutBatch) -> torch.Tensor:
        """Log-probabilities of the response tokens. Shape: (B, T)."""
        if self.model_settings.fused_logprobs:
            return self._fused_log_probs(model, batch)[0]
        return logprobs_from_logits(self._response_logits(model, batch), batch.responses)

    def _reference_logits(self, batch: RolloutBatch) -> torch.Tensor:
        """The reference's response logits (:meth:`_response_logits`), no graph. (B, T, V)."""
        with torch.no_grad(), reference_of(self.actor, self.reference) as reference:
            return self._response_logits(reference, batch)

    def values(self, batch: RolloutBatch) -> torch.Tensor:
        """Critic values at the positions that predict response tokens. (B, T)."""
        p, t = batch.prompt_length, batch.response_length
        assert self.critic_settings is not None
        if self.critic_settings.remove_padding:
            return packed_values(self.critic, batch.input_ids, batch.attention_mask, batch.position_ids, p).float()
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

        def one(micro: RolloutBatch) -> tuple[torch.Tensor, ...]:
            logits = self._response_logits(self.actor, micro)  # (b, T, V)
            ref_logits = self._reference_logits(micro)  # (b, T, V)
            return (
                logprobs_from_logits(logits, micro.responses),
                logprobs_from_logits(ref_logits, micro.responses),
                full_kl_from_logits(logits, ref_logits),
            )

        a = self.actor_settings
        return per_row(one, batch, a.pass_micro_batch_size, a.forward_max_token_len)

    @torch.no_grad()
    def _no_grad_pass(
        self, fn: Callable[[RolloutBatch], torch.Tensor], batch: RolloutBatch, rows: int | None,
        tokens: int | None,
    ) -> torch.Tensor:
        """``fn`` over micro-batches of ``rows`` rows, or of ``tokens`` real tokens when set."""
        return per_row(lambda micro: (fn(micro),), batch, rows, tokens)[0]

    def _saved_activations(self, offload: bool) -> Any:
        """Where the backward pass keeps activations: on the CPU when offloading on a GPU."""
        if offload and self.device.type == "cuda":
            return torch.autograd.graph.save_on_cpu(pin_memory=True)
        return contextlib.nullcontext()

    # ------------------------------------------------------------------ one RL iteration

    def training_step(self, batch: RolloutBatch, batch_idx: int) -> None:
        """One RL iteration on a rolled-out batch, in this order:

        1. the no-grad passes it needs: old and reference log-probabilities, critic values;
        2. the reward: the rollout's scores, shaped by the rollout-batch hooks before the
           advantages (:func:`~agentfly.core.batch_hooks.shape_rewards`: the KL penalty of
           ``KLRewardCallback`` and its controller);
        3. the advantages, written by the estimator's hook
           (:func:`~agentfly.core.batch_hooks.compute_advantages`: ``AdvantageCallback``);
        4. the updates: the critic's, then the actor's (:meth:`_update_models`).

        The hooks of 2 and 3 are ``rollout_callbacks``
        (:class:`~agentfly.core.batch_hooks.RolloutBatchHook` s, which the trainer's callbacks
        join); a user's own is one more in ``trainer.callbacks`` (its ``stage`` says where it runs).
        """
        metrics = self._no_grad_passes(batch)
        metrics.update(batch.rollout_metrics)  # the rollout's own (reward, tools, timing)
        metrics.update(shape_rewards(self.rollout_callbacks, self.trainer, self, batch))
        metrics.update(compute_advantages(self.rollout_callbacks, self.trainer, self, batch))
        metrics.update(self._update_models(batch))
        metrics.update(self._batch_metrics(batch))
        self.iteration += 1
        metrics["training/iteration"] = float(self.iteration)
        shown = {"reward": "training/reward/mean", "kl": "actor/kl_loss", "entropy": "actor/entropy"}
        bar = {k: metrics[v] for k, v in shown.items() if v in metrics}
        self.log_dict(bar, on_step=True, prog_bar=True, logger=False, batch_size=len(batch))
        metrics = self._step_metrics.complete(metrics)  # no stale value of an earlier iteration
        self.log_dict(metrics, on_step=True, prog_bar=False, batch_size=len(batch))

    def _no_grad_passes(self, batch: RolloutBatch) -> dict[str, float]:
        """Fill the batch's ``old_log_probs``, ``ref_log_probs``, ``full_kl`` and ``values`` where
        this iteration needs them; returns their timings."""
        kl, correction, critic = self.kl, self.correction, self.critic_settings
        metrics: dict[str, float] = {}
        clock = time.perf_counter
        if kl.use_kl_in_reward and kl.kl_penalty == "full":
            start = clock()
            batch.old_log_probs, batch.ref_log_probs, batch.full_kl = self.full_kl_to_reference(batch)
            metrics["timing/reference_s"] = clock() - start
        if correction.bypass_mode:  # the engine's log-probabilities are the old ones: nothing to recompute
            batch.old_log_probs = off_policy.behaviour(batch)
        # an update reusing the rollout needs them, and a rejection does before the first step
        a = self.actor_settings
        reuses = a.epochs > 1 or len(batch) > a.mini_batch_size or kl.use_kl_in_reward
        needs_old = reuses or correction.rollout_rs is not None
        if needs_old and batch.old_log_probs is None:
            start = clock()
            rows, tokens = a.pass_micro_batch_size, a.forward_max_token_len
            batch.old_log_probs = self._no_grad_pass(lambda b: self.log_probs(self.actor, b), batch, rows, tokens)
            metrics["timing/old_log_prob_s"] = clock() - start
        needs_ref = kl.use_kl_in_reward or kl.kl_loss_type != "full"
        if kl.needs_reference and needs_ref and batch.ref_log_probs is None:
            start = clock()
            rows, tokens = kl.reference_micro_batch_size or a.micro_batch_size, kl.reference_max_token_len
            with reference_of(self.actor, self.reference) as reference:
                batch.ref_log_probs = self._no_grad_pass(lambda b: self.log_probs(reference, b), batch, rows, tokens)
            metrics["timing/reference_s"] = clock() - start
        if critic is not None:
            start = clock()
            u = critic.update
            batch.values = self._no_grad_pass(self.values, batch, u.pass_micro_batch_size, u.forward_max_token_len)
            metrics["timing/critic_values_s"] = clock() - start
        return metrics

    def _update_models(self, batch: RolloutBatch) -> dict[str, float]:
        """The critic's update, then the actor's (after ``critic.warmup_iterations``) on the batch
        less what ``rollout_rs`` rejects; returns their metrics and timings."""
        critic, clock = self.critic_settings, time.perf_counter
        actor_batch, metrics = batch, {}
        if self.correction.rollout_rs is not None and not self.correction.bypass_mode:  # else the loss's
            actor_batch, metrics = off_policy.reject(self.correction, batch)
        optimizers = self.optimizers()
        optimizers = optimizers if isinstance(optimizers, list) else [optimizers]
        schedulers = self.lr_schedulers()
        schedulers = schedulers if isinstance(schedulers, list) else [schedulers]
        if critic is not None:
            start = clock()
            critic_update = (self.critic, critic.update, self._critic_loss)
            metrics.update(self._update(*critic_update, batch, optimizers[1], schedulers[1]))
            metrics["timing/critic_update_s"] = clock() - start
        if critic is None or self.iteration >= critic.warmup_iterations:
            start = clock()
            actor = (self.actor, self.actor_settings, self._actor_loss)
            metrics.update(self._update(*actor, actor_batch, optimizers[0], schedulers[0]))
            metrics["timing/update_s"] = clock() - start
            self.weights_version += 1  # on every rank alike: the engines' sync gathers collectively
            self.policy_version += 1
        return metrics

    def _minibatches(self, size: int, s: UpdateSettings, epoch: int) -> list[torch.Tensor]:
        """One epoch's mini-batches of row indices: in rollout order, or a seeded permutation."""
        order = torch.arange(size)
        if s.shuffle_seed is not None:
            seed = s.shuffle_seed * 1_000_003 + self.iteration * 1009 + epoch
            order = torch.randperm(size, generator=torch.Generator().manual_seed(seed))
        return list(order.to(self.device).split(min(s.mini_batch_size, size)))

    def _update(
        self, model: Any, s: UpdateSettings, loss_fn: LossFn, batch: RolloutBatch, opt: Any,
        scheduler: Any,
    ) -> dict[str, float]:
        """``s.epochs`` passes over ``batch`` in mini-batches, one optimizer step each, their
        micro-batches' gradients accumulated. Returns the metrics averaged over the steps: within
        a mini-batch an additive loss is the sum of its micro-batches' shares and any other
        metric (a token mean: entropy, clip fractions) their mean weighted by response tokens,
        so that how the mini-batch is split (rows, a token budget, packed or not) changes no
        metric; ``.../max`` and ``.../min`` are the largest and smallest."""
        sums: dict[str, list[float]] = {}
        self._stepped = 0
        for epoch in range(s.epochs):
            for rows in self._minibatches(len(batch), s, epoch):
                mini = batch.select(rows)
                norms = agg_norms(s.loss_agg_mode, mini.response_mask, s.loss_scale_factor)
                opt.zero_grad()
                parts: dict[str, float] = {}
                weighted: dict[str, list[float]] = {}  # name -> [sum of value * tokens, tokens]
                for micro in split(mini, s.micro_batch_size, s.max_token_len):
                    with self._saved_activations(s.activation_offload):
                        loss, losses = loss_fn(micro, s.loss_agg_mode, norms)
                        self.manual_backward(loss)
                    tokens = float(micro.response_mask.sum())
                    for k, v in losses.items():
                        if k in ADDITIVE_METRICS:
                            parts[k] = parts.get(k, 0.0) + v
                        elif k.endswith(("/max", "/min")):
                            sums.setdefault(k, []).append(v)
                        else:
                            acc = weighted.setdefault(k, [0.0, 0.0])
                            if tokens:  # a micro-batch of no response token has no token mean
                                acc[0] += v * tokens
                                acc[1] += tokens
                for k, v in parts.items():  # the mini-batch's loss: the sum of its micro-batch shares
                    sums.setdefault(k, []).append(v)
                for k, (total, tokens) in weighted.items():  # its token mean
                    sums.setdefault(k, []).append(total / tokens if tokens else math.nan)
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
        p, kl = self.policy_loss_settings, self.kl
        mask = micro.response_mask
        # entropy is logged either way; it joins the graph only when the bonus uses it
        full = None  # the full-vocabulary KL from these logits, when the loss uses it
        if self.model_settings.fused_logprobs:  # no (B, T, V) logits (compose refuses a full KL)
            logp, entropy = self._fused_log_probs(self.actor, micro)
            entropy = entropy if p.entropy_coeff else entropy.detach()
        else:
            logits = self._response_logits(self.actor, micro)  # (B, T, V)
            logp = logprobs_from_logits(logits, micro.responses)
            if p.entropy_coeff:
                entropy = entropy_from_logits(logits)
            else:
                with torch.no_grad():
                    entropy = entropy_from_logits(logits.detach())
            if kl.use_kl_loss and kl.kl_loss_type == "full":
                ref_logits = self._reference_logits(micro)  # (B, T, V)
                full = full_kl_from_logits(logits, ref_logits)
                del ref_logits
            del logits
        old = logp.detach() if micro.old_log_probs is None else micro.old_log_probs
        assert micro.advantages is not None
        weights, out = off_policy.loss_weights(self.correction, micro, logp, fresh=self._stepped == 0)
        pg, pg_metrics = self.policy_loss_fn(
            old, logp, micro.advantages, mask, clip_ratio_low=p.clip_ratio_low,
            clip_ratio_high=p.clip_ratio_high, clip_ratio_c=p.clip_ratio_c, loss_agg_mode=mode,
            weights=weights, config=p, **norms,
        )
        loss = pg
        out["actor/pg_loss"] = float(pg.detach())
        out.update({f"actor/{k}": float(v) for k, v in pg_metrics.items()})
        ent = agg_loss(entropy, mask, mode, **norms)
        out["actor/entropy"] = float(masked_mean(entropy.detach(), mask))
        if p.entropy_coeff:
            loss = loss - p.entropy_coeff * ent
        if kl.use_kl_loss:
            if full is not None:
                per_token = full
            else:
                if micro.ref_log_probs is None:
                    raise ValueError("use_kl_loss needs the reference (use_reference=True)")
                per_token = kl_penalty(logp, micro.ref_log_probs, kl.kl_loss_type)
            kl_loss = agg_loss(per_token, mask, mode, **norms)
            loss = loss + kl.kl_loss_coef * kl_loss
            out["actor/kl_loss"] = float(kl_loss.detach())
            out["actor/kl_coef"] = kl.kl_loss_coef
        return loss, out

    def _critic_loss(
        self, micro: RolloutBatch, mode: str, norms: dict[str, Any]
    ) -> tuple[torch.Tensor, dict[str, float]]:
        assert micro.values is not None and micro.returns is not None and self.critic_settings is not None
        loss, m = value_loss(
            self.values(micro), micro.values, micro.returns, micro.response_mask,
            self.critic_settings.cliprange_value, mode, **norms,
        )
        return loss, {"critic/vf_loss": float(loss.detach()), "critic/vf_clipfrac": float(m["vf_clipfrac"])}

    def _batch_metrics(self, batch: RolloutBatch) -> dict[str, float]:
        """The batch the update trained on: ``training/reward/*`` is each chain's reward before
        any shaping (verl logs it as ``critic/score/*``, critic or not; a chain without a reward, a
        failed one kept by ``algorithm.failed_chains=keep``, counts as 0 where ``rollout/reward/*``
        leaves it out), the response length, the KL to the reference, the engine-vs-trainer
        log-prob gap. verl's ``critic/score/mean`` is a row's summed scores and
        ``critic/rewards/mean`` its summed token rewards after shaping (KL in the reward, turn
        rewards): the return a group estimator reads."""
        mask = batch.response_mask
        scores = batch.token_level_scores.sum(-1)
        rewards = batch.token_level_rewards.sum(-1)
        out = {
            "training/reward/mean": float(scores.mean()),
            "training/reward/max": float(scores.max()),
            "training/reward/min": float(scores.min()),
            "critic/score/mean": float(scores.mean()),
            "critic/rewards/mean": float(rewards.mean()),
            "response_length/mean": float(mask.sum(-1).mean()),
        }
        if batch.ref_log_probs is not None and batch.old_log_probs is not None:
            out["actor/kl_to_ref"] = float(masked_mean(batch.old_log_probs - batch.ref_log_probs, mask))
        out.update(off_policy.batch_gap(self.correction, batch))
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
        metrics = metric_sums.gathered_means(
            getattr(self, "_val_sums", {}), getattr(self, "_val_error", None),
            f"the validation at iteration {self.iteration}",
        )
        if metrics:
            self.log_dict(metrics, on_step=False, on_epoch=True, sync_dist=False)
        self._val_sums = {}

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["agentfly_iteration"] = self.iteration
        checkpoint["agentfly_policy_version"] = self.policy_version
        drop_frozen_base(checkpoint, self.actor)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.configure_model()
        restore_frozen_base(checkpoint, self.actor)
        self.iteration = int(checkpoint.get("agentfly_iteration", 0))
        self.policy_version = int(checkpoint.get("agentfly_policy_version", self.iteration))
        self.weights_version += 1  # the checkpoint's weights replace the ones the engines may hold
