"""How much memory a worker pool's processes may claim together: the machine's.

Each worker may grow to ``memory_mb`` of address space (``RLIMIT_AS``). With the fair queue's
extra workers, the spares and the workers of lent places (:mod:`.lending`), a pool may hold far
more processes than ``num_workers``; unbounded, their limits would add up to many times the
machine (132 workers of 4 GiB: 528 GiB). So a worker beyond the first ``num_workers`` starts only
while the pool's claim, with the new worker's ``memory_mb``, stays within the budget
(``agent.run_config.workers.memory_budget_mb``; by default the machine's memory: ``MemTotal``,
or the cgroup's limit when lower). The claim counts each worker at its ``memory_mb``, except a
worker whose call is lent: it is idle on the CPU, so it counts at its resident memory (a lent call
that computes again is reclaimed and counts in full again, and nothing starts until the claim is
back under the budget). An idle worker is let go when the calls do not need it, or while the
claim is past the budget (a worker whose lent call ended counts in full again). The first
``num_workers`` always start: the pool is never smaller than asked (a warning says when they
alone pass the budget). ``memory_mb=0`` (no limit) leaves the pool bounded by its process count
alone. The fork server (its imports, shared with the workers it forks) is not counted.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

from agentfly.rollout.execution.worker_process import Worker

logger = logging.getLogger("agentfly.rollout.execution.workers")


def machine_memory_mb() -> int:
    """The memory this process may use, in MiB: ``MemTotal``, or its cgroup's limit when lower."""
    total = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            total = int(line.split()[1]) // 1024
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(limit_file).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and 0 < int(text) // 2**20 < total:
            total = int(text) // 2**20
    return total


def claim_mb(workers: Iterable[Worker], memory_mb: int) -> float:
    """What the pool's workers may use together (see the module docstring)."""
    return sum(w.rss_mb if w.job is not None and w.job.lent else memory_mb for w in workers)


def may_start(workers: list[Worker], memory_mb: int, budget_mb: int, num_workers: int) -> bool:
    """Whether one more worker fits: one of the first ``num_workers``, or within the budget."""
    if len(workers) < num_workers or memory_mb <= 0:
        return True
    return claim_mb(workers, memory_mb) + memory_mb <= budget_mb


def surplus(
    workers: list[Worker], wanted: int, memory_mb: int, budget_mb: int, num_workers: int
) -> list[Worker]:
    """The idle workers to let go: those beyond ``wanted`` (never below ``num_workers``), then
    more while the claim is past the budget (a lent call that ended leaves its worker idle, and
    an idle worker counts in full)."""
    idle = [w for w in workers if w.state == "idle"]
    out = idle[: max(0, len(workers) - max(wanted, num_workers))]
    claim = claim_mb(workers, memory_mb) - memory_mb * len(out)
    left = len(workers) - len(out)
    for w in idle[len(out) :]:
        if memory_mb <= 0 or claim <= budget_mb or left <= num_workers:
            break
        out.append(w)
        claim, left = claim - memory_mb, left - 1
    return out


def warn_over_budget(num_workers: int, memory_mb: int, budget_mb: int) -> None:
    """Say so when the first ``num_workers`` alone may claim more than the budget."""
    if num_workers * memory_mb > budget_mb:
        logger.warning(
            "%d tool/reward workers of %d MiB each (agent.run_config.workers.num_workers, "
            "memory_mb) may claim more than the memory budget of %d MiB: no worker starts "
            "beyond them (no spare, no lent place); lower memory_mb",
            num_workers,
            memory_mb,
            budget_mb,
        )
