"""Prompts and their loaders: the rows that fit, the training batch of each iteration, each
rank's slice of the validation rows.

Every row's prompt is measured when the data is loaded (:mod:`agentfly.rollout.prompt_fit`); too
long a prompt is dropped (and counted: ``data/{split}_prompts_dropped``), cut, or stops the run,
per ``data.*``. The loaders yield *prompts* (cheap; Lightning may fetch them one step ahead): the
rollout runs when the batch is handed to the update (:mod:`agentfly.rollout.handover`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils.data import DataLoader

from agentfly.rollout.data import DataError, load_rows
from agentfly.rollout.prompt_fit import PromptRenderer, fit_prompts, prompt_limit

#: a prompt batch: ``(row index, row)`` pairs
Items = list[tuple[int, dict[str, Any]]]


@dataclass
class PromptRows:
    """The rows whose prompt fits, per split, and the counts to log.

    Attributes:
        train: the training rows.
        val: the validation rows.
        counts: ``data/{split}_prompts_dropped`` and ``..._truncated``.
    """

    train: list[dict[str, Any]] = field(default_factory=list)
    val: list[dict[str, Any]] = field(default_factory=list)
    counts: dict[str, float] = field(default_factory=dict)


def load_prompt_rows(
    train_files: list[str], val_files: list[str], renderer: PromptRenderer, *,
    max_prompt_length: int | None, filter_overlong_prompts: bool, truncation: str,
    prompt_key: str | None, train_batch_size: int,
) -> PromptRows:
    """Load the rows of both splits and keep those whose prompt fits ``renderer``'s context.

    Raises:
        DataError: fewer training rows are left than one batch needs (naming both numbers).
    """
    limit = prompt_limit(max_prompt_length, int(renderer.max_model_len))
    out = PromptRows()
    for split, files in (("train", train_files), ("val", val_files)):
        if not files:
            continue
        rows = [(f, i, r) for f in files for i, r in enumerate(load_rows(f, prompt_key))]
        fitted = fit_prompts(
            rows, renderer, split=split, limit=limit, filter_overlong=filter_overlong_prompts,
            truncation=truncation, prompt_key=prompt_key,
        )
        setattr(out, split, fitted.rows)
        out.counts[f"data/{split}_prompts_dropped"] = float(len(fitted.dropped))
        out.counts[f"data/{split}_prompts_truncated"] = float(len(fitted.truncated))
    if train_files and len(out.train) < train_batch_size:
        dropped = int(out.counts.get("data/train_prompts_dropped", 0))
        raise DataError(
            f"data.train_batch_size={train_batch_size} is larger than the {len(out.train)} "
            f"training rows left after dropping {dropped} whose prompt is too long "
            f"(data.max_prompt_length={limit})"
        )
    return out


def rows_collate(items: Items) -> Items:
    """A batch of ``(index, row)`` pairs, as drawn."""
    return items


class _IndexedRows(torch.utils.data.Dataset):
    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> tuple[int, dict[str, Any]]:
        return i, self.rows[i]


class IterationBatches(torch.utils.data.IterableDataset):
    """Prompt batches addressed by RL iteration: batch ``k`` depends only on (seed, k, rank).

    Epoch ``e`` is one seeded permutation of the rows (``seed + e``); iteration ``k`` takes the
    ``k``-th slice of ``world * batch_size`` rows of it, and this rank its share. A resumed run
    starts at the iteration the checkpoint holds and so sees exactly the prompts an
    uninterrupted run would have seen.
    """

    def __init__(
        self,
        rows: list[dict[str, Any]],
        batch_size: int,
        *,
        seed: int,
        shuffle: bool,
        start: Callable[[], int],
        rank: Callable[[], tuple[int, int]],
    ) -> None:
        self.rows = rows
        self.batch_size = batch_size
        self.seed = 0 if seed is None else seed
        self.shuffle = shuffle
        self.start = start
        self.rank = rank

    def batch(self, k: int) -> Items:
        rank, world = self.rank()
        global_size = self.batch_size * world
        per_epoch = len(self.rows) // global_size
        if per_epoch == 0:
            raise ValueError(
                f"data.train_batch_size={global_size} is larger than the {len(self.rows)} training rows"
            )
        epoch, step = divmod(k, per_epoch)
        if self.shuffle:
            order = torch.randperm(len(self.rows), generator=torch.Generator().manual_seed(self.seed + epoch))
        else:
            order = torch.arange(len(self.rows))
        chunk = order[step * global_size : (step + 1) * global_size]
        mine = chunk[rank * self.batch_size : (rank + 1) * self.batch_size].tolist()
        return [(i, self.rows[i]) for i in mine]

    def __iter__(self):
        k = self.start()
        while True:
            yield self.batch(k)
            k += 1


def train_loader(batches: IterationBatches) -> DataLoader:
    """One prompt batch per iteration, from the iteration the run is at."""
    batches.batch(0)  # a batch larger than the data fails here, naming both sizes
    return DataLoader(batches, batch_size=None, collate_fn=rows_collate)


def val_loader(rows: list[dict[str, Any]], rank: int, world: int, batch_size: int | None) -> DataLoader:
    """This rank's contiguous slice of the validation rows (ranks may differ by one row), in
    batches of ``batch_size`` (None: the whole slice)."""
    n = len(rows)
    if n < world:
        raise ValueError(f"{n} validation rows cannot be split over {world} ranks (each needs one)")
    mine = list(range(rank * n // world, (rank + 1) * n // world))
    dataset = torch.utils.data.Subset(_IndexedRows(rows), mine)
    return DataLoader(dataset, batch_size=batch_size or len(mine), shuffle=False, collate_fn=rows_collate)
