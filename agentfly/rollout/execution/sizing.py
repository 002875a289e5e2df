"""How many worker processes a pool runs when its size is not given."""

from __future__ import annotations

import os

IO_BOUND_MAX_WORKERS = 64  # the default pool of tools that wait: one worker per chain, up to this


def default_num_workers(io_bound: bool = False, calls_in_flight: int = 0) -> int:
    """Workers of a pool sized ``None``: the usable CPU count, within 2..8, for code that
    computes; for code that waits (``io_bound``: an HTTP call, a subprocess), one per call in
    flight (``calls_in_flight``, e.g. the chains running at once), up to
    :data:`IO_BOUND_MAX_WORKERS`, and never fewer than for code that computes."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 2
    cpu_bound = min(8, max(2, cores))
    if not io_bound:
        return cpu_bound
    return max(cpu_bound, min(IO_BOUND_MAX_WORKERS, int(calls_in_flight)))


def default_spares(num_workers: int) -> int:
    """Idle workers a started pool keeps ready beyond ``num_workers``: a quarter, 1 to 4."""
    return max(1, min(4, num_workers // 4))
