"""The hook through which callbacks edit a rollout batch, and the batch keys they use.

Batch keys (all tensors; B rows, T response tokens):
    response_mask (B, T): 1 on sampled tokens, 0 on observations and padding.
    token_level_scores (B, T): the reward function's score, at the last sampled token.
    token_level_rewards (B, T): scores after reward shaping (e.g. minus a KL penalty).
    index (B,): group id of the prompt each row answers.
    values (B, T): critic values at rollout time (GAE).
    reward_baselines (B,): reward of the greedy chain of the row's prompt (an estimator that
        ``needs_baselines``, e.g. ReMax).
    old_log_probs (B, T), ref_log_probs (B, T): policy and reference log-probabilities.
    full_kl (B, T): full-vocabulary KL(old policy ‖ reference) per position (``kl_penalty=full``
        in the reward).
    advantages (B, T), returns (B, T): written by the advantage callback.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch

Batch = dict[str, Any]


@runtime_checkable
class BatchHook(Protocol):
    """A callback that edits a rollout batch; lower ``stage`` runs first."""

    stage: int

    def on_rollout_batch(self, trainer: Any, pl_module: Any, batch: Batch) -> dict[str, float]:
        """Edit ``batch`` in place and return metrics to log."""
        ...


def run_batch_hooks(trainer: Any, pl_module: Any, batch: Batch) -> dict[str, float]:
    """Run every ``BatchHook`` among ``trainer.callbacks`` in stage order; merge their metrics."""
    hooks = [cb for cb in getattr(trainer, "callbacks", []) if isinstance(cb, BatchHook)]
    metrics: dict[str, float] = {}
    for hook in sorted(hooks, key=lambda h: h.stage):
        metrics.update(hook.on_rollout_batch(trainer, pl_module, batch))
    if "token_level_rewards" not in batch and "token_level_scores" in batch:
        batch["token_level_rewards"] = batch["token_level_scores"]
    return metrics


def to_float(x: torch.Tensor | float) -> float:
    return float(x.detach().item()) if isinstance(x, torch.Tensor) else float(x)
