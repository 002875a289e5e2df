"""Validation rollouts: each batch rolled out with ``val_kwargs`` sampling and reduced to sums.

Validation batches are rolled out with ``val_kwargs`` sampling (greedy by default; ``n`` chains per
prompt), optionally a greedy pass beside a sampled one, and reduced to sums and counts per data
source (:mod:`agentfly.core.metric_sums`). Each rank validates its own slice of the validation
rows; the module adds the ranks' sums and counts before logging, so the logged means are exact
whatever the world size.
"""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from agentfly.core import metric_sums
from agentfly.core.metric_sums import Sums
from agentfly.rollout.handover import RunPosition
from agentfly.rollout.loaders import Items
from agentfly.rollout.summary import trajectory_record
from agentfly.rollout.tools.base import INVALID_ARGUMENTS, UNKNOWN_TOOL

#: a tool call the model got wrong in form: it did not parse, or named no tool of the agent's, or
#: its arguments did not fit the tool's schema
FORMAT_ERRORS = (INVALID_ARGUMENTS, UNKNOWN_TOOL)


def add_val_sums(sums: Sums, prefix: str, trajs: list[Any]) -> None:
    """Add one pass's reward, accuracy (where the reward reports ``acc``), success rate (where it
    reports ``won``: an environment's episode won), tool-call rate, format-error rate (chains with a
    call of :data:`FORMAT_ERRORS`) and turns, per data source, as [sum, count]."""
    for t in trajs:
        source = str(t.row.get("data_source", "val"))
        values = {
            "reward": float(t.reward or 0.0),
            "tool_call_rate": 1.0 if t.tool_calls else 0.0,
            "format_error_rate": 1.0 if any(c.error in FORMAT_ERRORS for c in t.tool_calls) else 0.0,
            "turns/mean": float(t.num_turns),
        }
        if "acc" in t.reward_extras:
            values["accuracy"] = float(t.reward_extras["acc"])
        if "won" in t.reward_extras:
            values["success_rate"] = float(t.reward_extras["won"])
        for name, value in values.items():
            metric_sums.add(sums, f"{prefix}/{source}/{name}", value)


class ValidationRollouts:
    """Rolls out validation batches.

    Args:
        run: where the run is, and its rollout session.
        lock: one rollout at a time (validation waits for the producer's rollout in flight).
        prompt_key: the row field holding the question.
        temperature: validation sampling temperature; ``None`` or 0 = greedy.
        top_p: nucleus mass (when sampling).
        top_k: top-k cut (when sampling; -1 = none).
        n: chains per prompt (when sampling).
        also_greedy: when sampling, also run a greedy pass (one chain per prompt), logged as
            ``val_greedy/...``.
        trajectory_dir: where validation trajectories are written as JSONL; None: nowhere.
        num_samples: trajectories kept per validation in that file.
    """

    def __init__(
        self, run: RunPosition, lock: threading.Lock, *, prompt_key: str | None,
        temperature: float | None, top_p: float, top_k: int, n: int, also_greedy: bool,
        trajectory_dir: str | None, num_samples: int,
    ) -> None:
        self.run = run
        self.lock = lock
        self.prompt_key = prompt_key
        self.temperature = temperature
        self.top_p = top_p
        self.top_k = top_k
        self.n = max(1, int(n))
        self.also_greedy = also_greedy
        self.trajectory_dir = trajectory_dir
        self.num_samples = num_samples
        self.samples: list[dict[str, Any]] = []  # this validation's written trajectories

    @property
    def sampled(self) -> bool:
        return bool(self.temperature)

    def batch(self, items: Items) -> dict[str, Any]:
        """Roll out a validation batch: ``{"index": ..., "val_sums": {metric: [sum, count]}}``
        (after the producer's rollout in flight, if any: the two do not share the engines).

        With several ranks an error is not raised here but handed over as ``val_error``: the
        ranks may hold different numbers of batches, so they agree on failures at the epoch's
        end, where the module raises on every rank (:func:`~agentfly.core.ranks.fail_together`)
        instead of one rank waiting for the others' sums."""
        try:
            with self.lock:
                return self._batch(items)
        except Exception as error:
            if self.run.rank()[1] == 1:
                raise
            return {"index": torch.arange(0), "val_sums": {}, "val_error": error}

    def _batch(self, items: Items) -> dict[str, Any]:
        rows = [row for _, row in items]
        sums: Sums = {}
        passes = [("val", self.sampled)]
        if self.sampled and self.also_greedy:
            passes.append(("val_greedy", False))
        chains = 0
        for prefix, sampled in passes:
            trajs = self.run_pass(rows, sampled)
            chains += len(trajs)
            self._write_samples(trajs, prefix)
            add_val_sums(sums, prefix, trajs)
        return {"index": torch.arange(chains), "val_sums": sums}

    def run_pass(self, rows: list[dict[str, Any]], sampled: bool) -> list[Any]:
        """One pass over ``rows``: ``n`` sampled chains per prompt, or one greedy chain."""
        loop = self.run.session.loop
        if not sampled:
            return loop.run(rows, prompt_key=self.prompt_key, num_chains=1, greedy=True)
        sampling = replace(
            loop.sampling, temperature=float(self.temperature), top_p=self.top_p, top_k=self.top_k
        )
        return loop.run(rows, prompt_key=self.prompt_key, num_chains=self.n, sampling=sampling)

    def _write_samples(self, trajs: list[Any], prefix: str = "val") -> None:
        """Append up to ``num_samples`` validation trajectories per validation to a JSONL
        (``{prefix}_trajectories_iterNNNNNN.jsonl``; rank 0, from its slice of the rows) and keep
        those of the main pass in ``samples`` for the loggers."""
        if not self.trajectory_dir or self.run.rank()[0] != 0:
            return
        step = self.run.iteration()
        path = Path(self.trajectory_dir) / f"{prefix}_trajectories_iter{step:06d}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        written = sum(1 for _ in path.open()) if path.exists() else 0
        with path.open("a", encoding="utf-8") as f:
            for t in trajs[: max(0, self.num_samples - written)]:
                record = trajectory_record(t, self.run.session.tokenizer)
                if prefix == "val":
                    self.samples.append(record)
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
