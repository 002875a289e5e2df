"""The module runs the trainer's rollout-batch callbacks (a user's among them) once per
iteration, in ``stage`` order whatever the order of ``trainer.callbacks``, and forgets them when the
trainer is done with it."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from agentfly.callbacks import AdvantageCallback, RolloutBatchCallback
from tests.modules.one_update import GRPO_ADVANTAGES, fit_once, make_batch


class Seen(RolloutBatchCallback):
    """Records when it runs: its stage, and the batch's advantages at that moment."""

    def __init__(self, stage: int, log: list[tuple[int, Any]]) -> None:
        self.stage = stage
        self.seen = log

    def on_rollout_batch(self, trainer: Any, pl_module: Any, batch: Any) -> dict[str, float]:
        advantages = None if batch.advantages is None else batch.advantages.clone()
        self.seen.append((self.stage, advantages))
        return {f"probe/stage{self.stage}": float(self.stage)}


class FlippedAdvantages(AdvantageCallback):
    """A user's estimator: the named one with its sign flipped."""

    def on_rollout_batch(self, trainer: Any, pl_module: Any, batch: Any) -> dict[str, float]:
        metrics = super().on_rollout_batch(trainer, pl_module, batch)
        batch.advantages = -batch.advantages
        return metrics


def sampled_rows(advantages: torch.Tensor, mask: torch.Tensor) -> list[set[float]]:
    """Each row's distinct advantage over its sampled tokens (rounded)."""
    return [{round(float(a), 5) for a in row[m.bool()]} for row, m in zip(advantages, mask, strict=True)]


def test_user_callbacks_run_in_stage_order_whatever_the_list_order(tiny_model_dir):
    log: list[tuple[int, Any]] = []
    late, early = Seen(20, log), Seen(-5, log)
    module, metrics = fit_once(tiny_model_dir, make_batch(), [late, AdvantageCallback("grpo"), early])
    assert [stage for stage, _ in log] == [-5, 20]  # once each, lowest stage first
    assert log[0][1] is None  # before the advantages (stage 10) ...
    mask = make_batch().response_mask
    hand = [{round(a, 5)} for a in GRPO_ADVANTAGES]
    assert sampled_rows(log[1][1], mask) == hand  # ... and after them
    assert metrics["probe/stage-5"] == -5.0 and metrics["probe/stage20"] == 20.0
    assert module.rollout_callbacks == []  # the trainer's teardown took them out


def test_a_user_advantage_callback_replaces_the_estimator(tiny_model_dir):
    log: list[tuple[int, Any]] = []
    fit_once(tiny_model_dir, make_batch(), [FlippedAdvantages("grpo"), Seen(20, log)])
    [(_, advantages)] = log
    hand = [{round(-a, 5)} for a in GRPO_ADVANTAGES]
    assert sampled_rows(advantages, make_batch().response_mask) == hand


def test_without_an_advantage_callback_the_step_says_what_is_missing(tiny_model_dir):
    with pytest.raises(RuntimeError, match="no callback wrote the batch's advantages"):
        fit_once(tiny_model_dir, make_batch(), [Seen(0, [])])
