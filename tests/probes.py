"""What end-to-end tests measure about learning: a callback that watches each update from outside,
and a reward a random tiny model scores unevenly on.

``UpdateProbe`` (added to a fit with ``--trainer.callbacks+=tests.probes.UpdateProbe
--trainer.callbacks.path FILE``) keeps a copy of the actor and the batch before each update and,
with forward and backward passes of its own, writes one JSON line per iteration to
``FILE.rank{r}``:

- ``cos``: the cosine between the update's parameter step and the gradient of the surrogate
  ``Σ A·log p / N`` over the batch's sampled tokens at the weights the update started from, with
  the advantages A recomputed here from the batch's token rewards by the loop reference of
  :mod:`tests.estimators.reference` (GAE: from the critic's values read here before the update).
  Positive when the update climbs the policy gradient; about 0 for an update that ignores the
  advantages (zeroed), negative for one that descends it (flipped). At the first iteration the
  rest of the step (weight decay, a KL term at the reference, where its gradient vanishes) is
  unrelated to the advantages, so that is where the check is sharpest.
- ``row_adv`` / ``row_delta``: per row, the mean advantage and the mean change of log p over its
  sampled tokens (see :func:`agreement`).
- with a critic: ``value_error_before`` / ``value_error_after``, the mean squared distance of the
  critic's values on the sampled tokens from the reference returns.
- ``scores``: each row's score; ``even_share``: the ``probe_even_token_share`` reward recomputed
  from the row's sampled token ids (equal to ``scores`` when that reward is used).
- ``images``: each row's images (0 for a text row); a batch holding images goes through the
  model with them (:func:`agentfly.models.vision_inputs.vision_response_logits`).

Importing this module registers the reward ``probe_even_token_share`` (defined in the light
:mod:`tests.rewards`, the plug-in a fit names for it): the share of a chain's
sampled tokens whose id is even. A random model scores about one half, differently on nearly every
chain, so groups of chains have a best and a worst one from the first iteration on.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

import lightning.pytorch as pl
import torch

from tests.estimators import reference as ref
from tests.rewards import probe_even_token_share  # noqa: F401  (registers the reward)


def _positions(batch: Any) -> tuple[int, int]:
    return batch.prompt_length, batch.response_length


def _logprobs_with_grad(model: Any, batch: Any) -> torch.Tensor:
    """log p of every response token, from one plain forward of the padded batch. (B, T)."""
    p, t = _positions(batch)
    if batch.images is not None:  # rows holding images: their pixels, multimodal positions
        from agentfly.models.vision_inputs import vision_response_logits

        logits = vision_response_logits(model, batch.input_ids, batch.attention_mask, batch.images, t).float()
    else:
        logits = (
            model(**batch.model_inputs())
            .logits[:, p - 1 : p - 1 + t]
            .float()
        )  # (B, T, V): position P-1+t predicts response t
    return logits.log_softmax(-1).gather(-1, batch.responses.unsqueeze(-1)).squeeze(-1)


@torch.no_grad()
def sampled_logprobs(model: Any, batch: Any) -> torch.Tensor:
    """:func:`_logprobs_with_grad` without the graph. (B, T)."""
    return _logprobs_with_grad(model, batch)


@torch.no_grad()
def critic_values(critic: Any, batch: Any) -> torch.Tensor:
    """The critic's value at the positions predicting the response tokens. (B, T)."""
    p, t = _positions(batch)
    out = critic(**batch.model_inputs()).logits  # (B, P + T, 1)
    return out[:, p - 1 : p - 1 + t, 0].float()


def reference_advantages(
    name: str,
    rewards: torch.Tensor,
    mask: torch.Tensor,
    index: list[int],
    values: torch.Tensor | None,
    gamma: float,
    lam: float,
    norm: bool,
) -> tuple[list, list]:
    r, m = rewards.tolist(), mask.tolist()
    if name == "gae":
        assert values is not None
        return ref.gae(r, values.tolist(), m, gamma, lam)
    table = {
        "grpo": lambda: ref.grpo(r, m, index, norm),
        "dr_grpo": lambda: ref.grpo(r, m, index, norm=False),
        "rloo": lambda: ref.rloo(r, m, index),
        "reinforce_plus_plus": lambda: ref.reinforce_pp(r, m, gamma),
        "reinforce_plus_plus_baseline": lambda: ref.reinforce_pp_baseline(r, m, index),
        "opo": lambda: ref.opo(r, m, index),
    }
    if name not in table:
        raise ValueError(f"UpdateProbe has no reference for estimator {name!r}")
    return table[name]()


class BatchDigest(pl.Callback):
    """Writes, per iteration, what reached the update: each row's token ids, loss mask and score
    in batch order, and a digest of the actor's weights before the update (one JSON line to
    ``path``; ``--trainer.callbacks+=tests.probes.BatchDigest --trainer.callbacks.path FILE``).
    Two runs that should be one can then be compared stage by stage: the weights an iteration
    started from, the rollout it trained on, and only then the update."""

    def __init__(self, path: str) -> None:
        self.path = path

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        weights = sum(float(p.detach().double().abs().sum()) for p in pl_module.actor.parameters())
        line = {
            "iteration": int(pl_module.iteration) + 1,
            "weights_abs_sum": weights,
            "input_ids": batch.input_ids.tolist(),
            "response_mask": batch.response_mask.int().tolist(),
            "scores": [float(s) for s in batch.token_level_scores.sum(-1)],
        }
        with open(self.path, "a") as f:
            f.write(json.dumps(line) + "\n")


class UpdateProbe(pl.Callback):
    """Records how each update moved the actor (and critic) on its own batch; see the module doc."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._before: dict[str, Any] = {}
        self._values_before: torch.Tensor | None = None

    def on_train_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
    ) -> None:
        keys = ("input_ids", "attention_mask", "position_ids", "response_mask")
        frozen = {k: getattr(batch, k).detach().clone() for k in keys}
        self._before = {"batch": dataclasses.replace(batch, **frozen)}
        self._before["actor"] = snapshot = copy.deepcopy(pl_module.actor)
        if getattr(snapshot, "is_gradient_checkpointing", False):  # the same gradient, no recompute
            snapshot.gradient_checkpointing_disable()
        self._values_before = None
        if pl_module.critic is not None:
            self._values_before = critic_values(pl_module.critic, batch)

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        from agentfly.callbacks import AdvantageCallback

        b, snapshot, values = self._before["batch"], self._before.pop("actor"), self._values_before
        [adv_cb] = [cb for cb in trainer.callbacks if isinstance(cb, AdvantageCallback)]
        mask = b.response_mask.float()
        rewards = batch.token_level_rewards.detach().float()
        advantages, returns = reference_advantages(
            adv_cb.estimator.name,
            rewards,
            mask,
            batch.index.tolist(),
            values,
            adv_cb.gamma,
            adv_cb.lam,
            adv_cb.norm_adv_by_std_in_grpo,
        )
        adv = torch.tensor(advantages) * mask
        # the ascent direction of the surrogate Σ A·log p / N at the weights the update started from
        params = [p for p in snapshot.parameters() if p.requires_grad]
        with torch.enable_grad():
            logp_before = _logprobs_with_grad(snapshot, b)  # (B, T)
            surrogate = (adv * logp_before).sum() / mask.sum().clamp(min=1)
            direction = torch.autograd.grad(surrogate, params, allow_unused=True)
        named_after = dict(pl_module.actor.named_parameters())
        dot = norm_g = norm_step = 0.0
        for (name, before), g in zip(
            ((n, p) for n, p in snapshot.named_parameters() if p.requires_grad),
            direction,
            strict=True,
        ):
            step = (named_after[name].detach() - before.detach()).float()
            g = torch.zeros_like(step) if g is None else g.float()
            dot += float((g * step).sum())
            norm_g += float(g.square().sum())
            norm_step += float(step.square().sum())
        delta = (sampled_logprobs(pl_module.actor, b) - logp_before.detach()) * mask
        count = mask.sum(-1).clamp(min=1)  # (B,)
        record: dict[str, Any] = {
            "iteration": int(pl_module.iteration),
            "cos": dot / (norm_g * norm_step) ** 0.5 if norm_g and norm_step else 0.0,
            "row_adv": (
                (adv * mask).sum(-1) / count
            ).tolist(),  # mean over each row's sampled tokens
            "row_delta": (delta.sum(-1) / count).tolist(),
            "scores": (batch.token_level_scores * mask).sum(-1).tolist(),
            "images": [len(row) for row in b.images] if b.images is not None else [0] * len(mask),
            "even_share": [
                float(((row % 2 == 0).float() * m).sum() / m.sum()) if m.sum() else 0.0
                for row, m in zip(b.responses, mask, strict=True)
            ],
        }
        if values is not None:
            target = torch.tensor(returns)
            total = mask.sum()
            record["value_error_before"] = float(((values - target) ** 2 * mask).sum() / total)
            after = critic_values(pl_module.critic, b)
            record["value_error_after"] = float(((after - target) ** 2 * mask).sum() / total)
        with open(f"{self.path}.rank{trainer.global_rank}", "a") as f:
            f.write(json.dumps(record) + "\n")


def read_records(path: Any, ranks: int = 1) -> list[list[dict[str, Any]]]:
    """Each rank's records, in iteration order."""
    out = []
    for rank in range(ranks):
        with open(f"{path}.rank{rank}") as f:
            out.append([json.loads(line) for line in f])
    return out


def agreement(records: list[dict[str, Any]]) -> float:
    """Share of the rows with a non-zero mean advantage whose sampled tokens' mean log-probability
    moved the same way (up for a positive advantage, down for a negative one)."""
    pairs = [
        (a, d) for r in records for a, d in zip(r["row_adv"], r["row_delta"], strict=True) if a
    ]
    return sum(1 for a, d in pairs if (a > 0) == (d > 0)) / len(pairs) if pairs else 0.0


def assert_updates_follow_the_advantages(
    records: list[dict[str, Any]], min_agreement: float = 0.5
) -> None:
    """Every update climbed the policy gradient (``cos > 0``), the first one clearly
    (``cos > 0.1``: there the rest of the step is unrelated to the advantages, and an update that
    ignores them measures about 0), and more than ``min_agreement`` of the rows with a non-zero
    advantage moved their log-probability its way."""
    assert records, "no update was recorded"
    assert records[0]["cos"] > 0.1, records[0]
    for rec in records:
        assert any(rec["row_adv"]), f"iteration {rec['iteration']}: no advantage to learn from"
        assert rec["cos"] > 0.0, rec
        assert agreement([rec]) > min_agreement, (agreement([rec]), rec)
