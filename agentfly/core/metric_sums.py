"""Exact means across batches and ranks: each metric travels as ``[sum, count]``.

Validation rolls out batch by batch on every rank, each rank with its own (possibly uneven) share
of the rows. Adding sums and counts, and dividing once at the end, gives the mean over all rows
whatever the batching and the world size; a mean of means would not.
"""

from __future__ import annotations

from collections.abc import Iterable

Sums = dict[str, list[float]]
"""``{metric: [sum, count]}``."""


def add(sums: Sums, name: str, total: float, count: float = 1.0) -> None:
    """Add ``total`` over ``count`` observations to ``sums[name]`` (in place)."""
    entry = sums.setdefault(name, [0.0, 0.0])
    entry[0] += total
    entry[1] += count


def merge(parts: Iterable[Sums], into: Sums | None = None) -> Sums:
    """The sums and counts of ``parts`` added up (into ``into`` when given)."""
    out: Sums = {} if into is None else into
    for part in parts:
        for name, (total, count) in part.items():
            add(out, name, total, count)
    return out


def means(parts: Iterable[Sums]) -> dict[str, float]:
    """``sum / count`` per metric over all ``parts``, sorted by name; a metric counted 0 times
    is left out."""
    totals = merge(parts)
    return {name: total / count for name, (total, count) in sorted(totals.items()) if count}


def gathered_means(local: Sums, error: Exception | None, what: str) -> dict[str, float]:
    """The means of every rank's ``local`` sums (this process's alone when it is not one of
    several ranks). With several ranks an ``error`` on any of them stops every rank first
    (:func:`agentfly.core.ranks.fail_together`, naming ``what``) instead of one rank waiting."""
    import torch.distributed as dist

    from agentfly.core.ranks import fail_together

    parts = [dict(local)]
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        fail_together(error, what)
        gathered: list[Sums] = [{} for _ in range(dist.get_world_size())]
        dist.all_gather_object(gathered, parts[0])
        parts = gathered
    return means(parts)
