"""An iteration's metrics as a logger should see them: every name logged before, this time too.

Lightning keeps a value logged with ``on_step=True`` for the rest of the epoch and hands it to the
loggers again at every later step where the name is not logged; agentfly's training epoch lasts
the whole run, so a count logged once (``rollout/failed_chains/tool_timeout``: 3) would be written
again, iteration after iteration, as if it happened each time. :class:`StepMetrics` writes every
name it has seen in each iteration: a count that did not occur as 0, anything else as NaN (not
measured in this iteration).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

#: metrics that count occurrences, one name per kind: absent in an iteration means none happened
COUNT_PREFIXES = (
    "rollout/failed_chains/",
    "rollout/failures/tool_kinds/",
    "rollout/failures/reward_kinds/",
    "rollout/finish_reasons/",
)


def is_count(name: str) -> bool:
    return name.startswith(COUNT_PREFIXES)


class StepMetrics:
    """The names logged so far in this process, and each iteration's metrics completed with them."""

    def __init__(self) -> None:
        self.seen: set[str] = set()

    def complete(self, metrics: Mapping[str, float]) -> dict[str, float]:
        """``metrics`` plus every name seen before and absent now (0 for a count, else NaN)."""
        out = dict(metrics)
        for name in self.seen.difference(out):
            out[name] = 0.0 if is_count(name) else math.nan
        self.seen.update(out)
        return out
