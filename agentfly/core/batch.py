"""The training batch of one RL iteration, from the collated rollout to the loss.

:func:`agentfly.rollout.collate.collate_trajectories` builds it; the LightningModule adds the
no-grad passes (old and reference log-probabilities, critic values); the rollout-batch callbacks
(:mod:`agentfly.callbacks.batch_hooks`) shape the rewards and write the advantages; the update
slices it into mini- and micro-batches and hands its tensors to the losses. Every field is set by
one producer, named below; a field that is ``None`` was not produced for this run.

Layout (B chains, P = longest prompt, T = longest response): prompts are left-padded to P,
responses right-padded to T, and the position that predicts response token ``t`` is ``P - 1 + t``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from agentfly.core.images import ImageInput


@dataclass
class RolloutBatch:
    """One iteration's trajectories, padded, with what the update computes from them.

    Set by collate (:mod:`agentfly.rollout.collate`):
        input_ids: prompt then response ids, padding = the pad id. Shape: (B, P + T), long.
        attention_mask: 1 on prompt and response tokens, 0 on padding. Shape: (B, P + T), long.
        position_ids: ``attention_mask.cumsum(-1) - 1``, clamped at 0. Shape: (B, P + T), long.
        response_mask: 1 on tokens the model sampled (trained on), 0 on tool observations and
            padding. Shape: (B, T), float32.
        token_level_scores: the reward function's score at the chain's last sampled token, 0
            elsewhere. Shape: (B, T), float32.
        token_level_rewards: the rewards the advantage estimator reads: a copy of the scores,
            replaced by a reward-shaping callback (KL in the reward). Shape: (B, T), float32.
        index: group id of the prompt each row answers (chains of one prompt share it).
            Shape: (B,), long.
        prompt_length: P.
        reward_baselines: the reward of the greedy chain of each row's prompt, when the
            estimator ``needs_baselines`` (ReMax); else None. Shape: (B,), float32.
        policy_version: the policy version that sampled each response token (the weights
            version the engine held, :attr:`Trajectory.policy_versions`); -1 where
            ``response_mask`` is 0. Shape: (B, T), long.
        rollout_log_probs: the engine's log-probability of each sampled token (the behaviour
            policy's, :attr:`agentfly.core.trajectory.Trajectory.rollout_logprobs`), 0 where
            ``response_mask`` is 0. Read by the off-policy correction
            (:mod:`agentfly.modules.rollout_correction`). Shape: (B, T), float32.
        turn_index: the assistant turn of each response token, 0-based over the chain
            (:attr:`Trajectory.turn_ids <agentfly.core.trajectory.Trajectory>`: observation
            tokens carry the turn that reads them), -1 on padding. Shape: (B, T), long.
        turn_rewards: each turn's own reward (:attr:`Trajectory.turn_rewards
            <agentfly.core.trajectory.Trajectory>`), in the row that holds the turn's tokens, 0
            elsewhere; K = the most turns of a chain in the batch. Enters the token rewards only
            with ``algorithm.use_turn_rewards`` (:class:`agentfly.callbacks.TurnRewardCallback`).
            Shape: (B, K), float32.
        turn_anchor: the anchor state each turn acted on (the question for the first turn, the
            observations of the turn before for the others), as an id: equal ids within one
            group (``index``) are the same state (or similar ones, GiGPO's
            ``enable_similarity``); -1 where the row does not hold the turn. Shape: (B, K), long.
        images: each row's images (:class:`~agentfly.core.images.ImageInput`), in the order of
            their placeholder runs in the row's ids, when some row holds images; else None. A
            list of B tuples (not a tensor: rows hold different numbers of images of different
            sizes); slicing selects rows, moving to a device leaves them where they are (the
            forward moves them, :mod:`agentfly.models.vision_inputs`).
        rollout_metrics: the rollout's own metrics (reward, tools, timing), logged with the
            update's. Not per row: slicing keeps them as they are.

    Set by the module before the callbacks (``AgentRLModule.training_step``), else None:
        old_log_probs: the rollout-time actor's log-probabilities of the response tokens, when
            the update reuses the rollout (several epochs or mini-batches, KL in the reward) or a
            rejection (``rollout_rs``) needs them; with ``bypass_mode``, ``rollout_log_probs``.
            Shape: (B, T), float32.
        ref_log_probs: the reference model's, when a KL term needs them. Shape: (B, T), float32.
        full_kl: full-vocabulary KL(old ‖ ref) per response position (``kl_penalty=full`` in
            the reward). Shape: (B, T), float32.
        values: the critic's values at rollout time (an estimator that ``needs_critic``).
            Shape: (B, T), float32.

    Set by the advantage callback (:class:`agentfly.callbacks.AdvantageCallback`):
        advantages: Shape: (B, T), float32, 0 where ``response_mask`` is 0.
        returns: the critic's targets. Shape: (B, T), float32, 0 where ``response_mask`` is 0.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    response_mask: torch.Tensor
    token_level_scores: torch.Tensor
    token_level_rewards: torch.Tensor
    index: torch.Tensor
    prompt_length: int
    reward_baselines: torch.Tensor | None = None
    policy_version: torch.Tensor | None = None
    rollout_log_probs: torch.Tensor | None = None
    turn_index: torch.Tensor | None = None
    turn_rewards: torch.Tensor | None = None
    turn_anchor: torch.Tensor | None = None
    images: list[tuple[ImageInput, ...]] | None = None
    rollout_metrics: dict[str, float] = field(default_factory=dict)
    old_log_probs: torch.Tensor | None = None
    ref_log_probs: torch.Tensor | None = None
    full_kl: torch.Tensor | None = None
    values: torch.Tensor | None = None
    advantages: torch.Tensor | None = None
    returns: torch.Tensor | None = None

    def __post_init__(self) -> None:
        rows = self.input_ids.shape[0]
        for name, value in self._tensors():
            if value.shape[0] != rows:
                raise ValueError(
                    f"RolloutBatch.{name} has {value.shape[0]} rows, input_ids has {rows}"
                )
        if self.images is not None and len(self.images) != rows:
            raise ValueError(f"RolloutBatch.images has {len(self.images)} rows, input_ids has {rows}")

    def __len__(self) -> int:
        """B, the number of chains."""
        return self.input_ids.shape[0]

    @property
    def responses(self) -> torch.Tensor:
        """The response ids (padding = the pad id). Shape: (B, T), long."""
        return self.input_ids[:, self.prompt_length :]

    @property
    def response_length(self) -> int:
        """T."""
        return self.input_ids.shape[1] - self.prompt_length

    def model_inputs(self) -> dict[str, torch.Tensor]:
        """The keyword arguments of a Hugging Face forward pass over the whole sequences."""
        return {
            "input_ids": self.input_ids,
            "attention_mask": self.attention_mask,
            "position_ids": self.position_ids,
        }

    def _tensors(self) -> list[tuple[str, torch.Tensor]]:
        """Every per-row tensor field that is set."""
        out = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, torch.Tensor):
                out.append((f.name, value))
        return out

    def _map(self, fn: Any) -> RolloutBatch:
        return dataclasses.replace(self, **{name: fn(value) for name, value in self._tensors()})

    def select(self, rows: torch.Tensor | slice) -> RolloutBatch:
        """The batch of the given rows (a slice, or a (b,) long tensor of row numbers)."""
        images = self.images
        if images is not None:
            images = images[rows] if isinstance(rows, slice) else [images[int(i)] for i in rows]
        tensors = {name: value[rows] for name, value in self._tensors()}
        return dataclasses.replace(self, **tensors, images=images)

    def split(self, size: int | None) -> list[RolloutBatch]:
        """Consecutive batches of ``size`` rows (the last one may be smaller); ``None``: whole."""
        step = size or len(self)
        return [self.select(slice(start, start + step)) for start in range(0, len(self), step)]

    def to(self, device: torch.device | str, non_blocking: bool = False) -> RolloutBatch:
        """The batch with every tensor on ``device`` (Lightning calls this to move a batch)."""
        return self._map(lambda value: value.to(device, non_blocking=non_blocking))
