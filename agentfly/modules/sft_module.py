"""The LightningModule of ``agentfly sft``: the policy fine-tuned on the assistant's tokens.

A batch is a :class:`~agentfly.core.batch.RolloutBatch` collated from examples laid out as the
agent loop lays out chains (:mod:`agentfly.sft.examples`): its ``response_mask`` is 1 exactly on
the assistant's tokens, so the loss is the negative log-likelihood of those tokens, averaged
over them (``token-mean`` over the rank's share of the batch: each micro-batch adds its share, so
the split into micro-batches does not change the step; DDP averages the ranks' gradients). One
``training_step`` is one optimizer step; ``iteration`` counts them (checkpointed), as
:class:`~agentfly.modules.rl_module.AgentRLModule` counts RL iterations, so the run's callbacks
(:class:`~agentfly.callbacks.iterations.IterationScheduleCallback`: stop, checkpoint, export)
serve both. The policy is loaded by :func:`~agentfly.modules.policy_model.build_trainable_policy`
(the whole model, or with LoRA the frozen base and its adapter: checkpoints hold the adapter)
and sharded by FSDP2 as the RL module's actor is. Validation logs ``val/loss``, the same mean over
every validation example's assistant tokens, on all ranks together. Examples holding images
(a vision-language policy's) carry their processed pixels in ``RolloutBatch.images``, split into
micro-batches with their rows, and run through the model's vision tower in the same forward.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import asdict
from typing import Any

import lightning.pytorch as pl
import torch

from agentfly.core import metric_sums
from agentfly.core.batch import RolloutBatch
from agentfly.modules.fsdp import total_norm
from agentfly.modules.linear_logprobs import (
    check_fused_head,
    hidden_instead_of_logits,
    linear_logprobs,
)
from agentfly.modules.lora import drop_frozen_base, restore_frozen_base
from agentfly.modules.losses import agg_loss, logprobs_from_logits
from agentfly.modules.policy_model import build_optimizer, build_trainable_policy
from agentfly.modules.response_logits import batch_response_logits
from agentfly.modules.settings import FSDPSettings, ModelSettings, OptimizerSettings, UpdateSettings

STAGE = "sft"  # written into checkpoints: a fit does not resume from one (agentfly.run.resume)


class AgentSFTModule(pl.LightningModule):
    """Holds the policy and its supervised loss.

    Args:
        model: the policy model (its ``temperature`` is not used: the loss is the model's own
            distribution).
        update: the rank's batch (``mini_batch_size``), its micro-batches, gradient clipping,
            gradient checkpointing and activation offload.
        optim: the optimizer and its schedule.
        fsdp: how FSDP2 shards the policy, used when the strategy provides a device mesh.
    """

    def __init__(
        self,
        model: ModelSettings,
        *,
        update: UpdateSettings,
        optim: OptimizerSettings = OptimizerSettings(),
        fsdp: FSDPSettings = FSDPSettings(),
    ) -> None:
        super().__init__()
        self.model_settings = model
        self.update = update
        self.optim = optim
        self.fsdp = fsdp
        self.save_hyperparameters({
            "model": asdict(model), "update": asdict(update), "optim": asdict(optim), "fsdp": asdict(fsdp),
        })
        self.automatic_optimization = False
        self.actor: Any = None
        self.iteration = 0  # optimizer steps done (checkpointed)
        self.validated_at: int | None = None  # the iteration of the last validation (this launch)

    def configure_model(self) -> None:
        if self.actor is not None:
            return
        m = self.model_settings
        self.actor = build_trainable_policy(m, self.update.gradient_checkpointing)
        if m.fused_logprobs:
            check_fused_head(self.actor, m.path)
        if self._device_mesh is not None:  # ModelParallelStrategy: FSDP2
            from agentfly.modules.fsdp import shard_mesh, shard_model

            shard_model(
                self.actor, shard_mesh(self._device_mesh, self.fsdp.size), offload=self.fsdp.offload,
                reshard_after_forward=self.fsdp.reshard_after_forward,
            )

    def configure_optimizers(self) -> Any:
        opt, sched = build_optimizer(self.actor, self.optim)
        return [opt], [sched]

    def token_log_probs(self, batch: RolloutBatch) -> torch.Tensor:
        """log p of every response token under the policy (with ``remove_padding`` the rows run
        packed, :mod:`agentfly.modules.packing`; a batch whose rows hold images runs whole, with
        their pixels and the model's multimodal positions, :mod:`agentfly.models.vision_inputs`;
        with ``use_fused_kernels`` from the hidden states and the LM head in chunks,
        :mod:`agentfly.modules.linear_logprobs`). Shape: (B, T)."""
        remove_padding = self.model_settings.remove_padding
        if self.model_settings.fused_logprobs:
            with hidden_instead_of_logits(self.actor) as weight:
                hidden = batch_response_logits(self.actor, batch, remove_padding=remove_padding)  # (B, T, H)
            return linear_logprobs(hidden, weight, batch.responses)[0]
        logits = batch_response_logits(self.actor, batch, remove_padding=remove_padding).float()  # (B, T, V)
        return logprobs_from_logits(logits, batch.responses)

    def _saved_activations(self) -> Any:
        if self.update.activation_offload and self.device.type == "cuda":
            return torch.autograd.graph.save_on_cpu(pin_memory=True)
        return contextlib.nullcontext()

    def training_step(self, batch: RolloutBatch, batch_idx: int) -> None:
        """One optimizer step on the rank's share of a batch, its micro-batches' gradients
        accumulated."""
        opt, sched = self.optimizers(), self.lr_schedulers()
        tokens = batch.response_mask.sum()
        opt.zero_grad()
        loss_total = 0.0
        for micro in batch.split(self.update.micro_batch_size):
            with self._saved_activations():
                nll = -self.token_log_probs(micro)  # (b, T)
                loss = agg_loss(nll, micro.response_mask, "token-mean", num_tokens=tokens)
                self.manual_backward(loss)
            loss_total += float(loss.detach())
        grad_norm = float(total_norm(torch.nn.utils.clip_grad_norm_(self.actor.parameters(), self.update.grad_clip)))
        if math.isfinite(grad_norm):
            opt.step()
        sched.step()
        self.iteration += 1
        metrics = {
            "train/loss": loss_total,
            "train/grad_norm": grad_norm,
            "train/lr": float(sched.get_last_lr()[0]),
            "train/assistant_tokens": float(tokens),
            "training/iteration": float(self.iteration),
            **batch.rollout_metrics,  # the data's counts
        }
        self.log("loss", loss_total, on_step=True, prog_bar=True, logger=False, batch_size=len(batch))
        self.log_dict(metrics, on_step=True, prog_bar=False, batch_size=len(batch))

    def on_validation_epoch_start(self) -> None:
        self._val_sums: metric_sums.Sums = {}

    @torch.no_grad()
    def validation_step(self, batch: RolloutBatch, batch_idx: int) -> None:
        """Adds the batch's summed NLL of assistant tokens and their count."""
        for micro in batch.split(self.update.micro_batch_size):
            nll = -self.token_log_probs(micro)  # (b, T)
            mask = micro.response_mask
            metric_sums.add(self._val_sums, "val/loss", float((nll * mask).sum()), float(mask.sum()))

    def on_validation_epoch_end(self) -> None:
        """The mean over every rank's validation tokens."""
        metrics = metric_sums.gathered_means(getattr(self, "_val_sums", {}), None, "the validation loss")
        if metrics:
            self.log_dict(metrics, on_step=False, on_epoch=True, sync_dist=False)
        self._val_sums = {}
        self.validated_at = self.iteration

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["agentfly_iteration"] = self.iteration
        checkpoint["agentfly_stage"] = STAGE
        drop_frozen_base(checkpoint, self.actor)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.configure_model()
        restore_frozen_base(checkpoint, self.actor)
        self.iteration = int(checkpoint.get("agentfly_iteration", 0))
