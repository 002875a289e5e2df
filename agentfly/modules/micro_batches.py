"""Micro-batches by a token budget instead of a row count (verl's ``use_dynamic_bsz``).

Rows are placed first-fit-decreasing: longest first, each into the first micro-batch with room
for it, so a micro-batch holds at most ``budget`` real tokens (prompt and response, the
attention mask's ones). verl balances the micro-batches with Karmarkar-Karp
(``rearrange_micro_batches``) and asserts that no row exceeds the budget; here a row longer than
the budget gets a micro-batch of its own, so a long response is trained on rather than refused.

The split changes no loss: the update's losses are normalised by the whole mini-batch's token
and row counts (:func:`agentfly.modules.losses.agg_norms`), so micro-batch losses add up to the
mini-batch's loss whatever their sizes (a micro-batch weighs by its token share, not by
``1 / number of micro-batches``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from agentfly.core.batch import RolloutBatch


def token_budget_groups(lengths: list[int], budget: int) -> list[list[int]]:
    """Row indices grouped so that each group's lengths sum to at most ``budget`` (a row longer
    than the budget alone), every row in exactly one group; each group in row order.

    Raises:
        ValueError: a budget that is not positive.
    """
    if budget <= 0:
        raise ValueError(f"token budget {budget} must be > 0")
    groups: list[list[int]] = []
    room: list[int] = []
    for row in sorted(range(len(lengths)), key=lambda r: (-lengths[r], r)):
        for g, left in enumerate(room):
            if lengths[row] <= left:
                groups[g].append(row)
                room[g] -= lengths[row]
                break
        else:
            groups.append([row])
            room.append(budget - lengths[row])
    return [sorted(g) for g in groups]


def micro_batch_rows(
    attention_mask: torch.Tensor, rows: int | None, tokens: int | None
) -> list[torch.Tensor]:
    """A batch's micro-batches as (b,) row-index tensors: by ``tokens`` real tokens when set,
    else consecutive runs of ``rows`` rows (None: the whole batch)."""
    n = attention_mask.shape[0]
    device = attention_mask.device
    if tokens is None:
        return list(torch.arange(n, device=device).split(rows or max(n, 1)))
    lengths = attention_mask.sum(-1).tolist()  # (B,) real tokens per row
    return [torch.tensor(g, device=device) for g in token_budget_groups(lengths, tokens)]


def restore_order(parts: list[torch.Tensor], groups: list[torch.Tensor]) -> torch.Tensor:
    """The per-row results of each micro-batch, put back in the batch's row order. (B, ...)."""
    out = torch.cat(parts)  # rows in micro-batch order
    order = torch.cat(groups).to(out.device)  # (B,) the batch row of each
    return out[torch.argsort(order)]


def split(batch: RolloutBatch, rows: int | None, tokens: int | None) -> list[RolloutBatch]:
    """A batch's micro-batches: by ``tokens`` real tokens when set, else ``rows`` rows."""
    if tokens is None:
        return batch.split(rows)
    return [batch.select(g) for g in micro_batch_rows(batch.attention_mask, rows, tokens)]


def per_row(
    fn: Callable[[RolloutBatch], tuple[torch.Tensor, ...]],
    batch: RolloutBatch,
    rows: int | None,
    tokens: int | None,
) -> tuple[torch.Tensor, ...]:
    """``fn``'s per-row results (a tuple of (b, ...) tensors) over the micro-batches of
    :func:`split`, each concatenated in the batch's row order."""
    if tokens is None:
        outs = [fn(micro) for micro in batch.split(rows)]
        return tuple(torch.cat(parts) for parts in zip(*outs, strict=True))
    groups = micro_batch_rows(batch.attention_mask, rows, tokens)
    outs = [fn(batch.select(g)) for g in groups]
    return tuple(restore_order(list(parts), groups) for parts in zip(*outs, strict=True))
