"""Prompts and their loaders: the rows that fit, the training batch of each iteration, each
rank's slice of the validation rows.

Every row's prompt is measured when the data is loaded (:mod:`agentfly.rollout.prompt_fit`); too
long a prompt is dropped (and counted: ``data/{split}_prompts_dropped``), cut, or stops the run,
per ``data.*``. The loaders yield *prompts* (cheap; Lightning may fetch them one step ahead): the
rollout runs when the batch is handed to the update (:mod:`agentfly.rollout.handover`).
"""

from __future__ import annotations

import hashlib
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
        rows = [(f, i, r) for f in files for i, r in enumerate(load_rows(f, prompt_key), 1)]  # rows from 1
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

    Dynamic sampling (:mod:`agentfly.rollout.dynamic_sampling`) rolls out further generation
    batches ``j >= 1`` of iteration ``k`` (:meth:`refill`): they depend only on (seed, k, j, rank)
    too, and never repeat a row of the iteration's earlier generation batches.
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

    def _epoch_order(self, k: int) -> tuple[torch.Tensor, int, int]:
        """Iteration ``k``'s epoch order of the row indices, the position of its chunk in it,
        and the chunk's size (every rank's share)."""
        global_size = self.batch_size * self.rank()[1]
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
        return order, step * global_size, global_size

    def batch(self, k: int) -> Items:
        order, start, size = self._epoch_order(k)
        return self._share(order[start : start + size])

    def refill(self, k: int, j: int) -> Items:
        """Generation batch ``j >= 1`` of iteration ``k`` on this rank: the ``j``-th slice of
        ``world * batch_size`` of the rows that batch ``k`` (every rank's share) did not draw,
        in an order fixed by (seed, k) (without shuffling: the rows that follow batch ``k``'s,
        wrapping around). The epoch's order is not consumed: a row drawn here is still drawn by
        its own iteration.

        Raises:
            ValueError: the rows left after batch ``k`` hold fewer than ``j`` such slices.
        """
        order, start, size = self._epoch_order(k)
        rest = torch.cat([order[start + size :], order[:start]])
        if self.shuffle:  # the rows that follow are the next iterations' prompts: draw at random
            mixed = hashlib.blake2b(f"refill/{self.seed}/{k}".encode(), digest_size=8).digest()
            gen = torch.Generator().manual_seed(int.from_bytes(mixed, "little") >> 1)
            rest = rest[torch.randperm(len(rest), generator=gen)]
        chunk = rest[(j - 1) * size : j * size]
        if len(chunk) < size:
            raise ValueError(
                f"generation batch {j} of iteration {k} needs {size} rows that the iteration "
                f"has not drawn yet; {len(self.rows)} training rows hold "
                f"{len(self.rows) // size} batches of {size}"
            )
        return self._share(chunk)

    def _share(self, chunk: torch.Tensor) -> Items:
        """This rank's part of a chunk of row indices (every rank's)."""
        rank = self.rank()[0]
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
