"""Learning-rate schedules: linear warm-up, then constant or cosine decay (``optim.warmup_style``).

The cosine form is verl's ``get_cosine_schedule_with_warmup``: after warm-up the multiplier
follows ``cos(π · num_cycles · 2 · progress)`` mapped onto ``[min_lr_ratio, 1]``, so with the
default ``num_cycles=0.5`` it falls from 1 to ``min_lr_ratio`` over the run. Departure: warm-up
step ``s`` (0-based) uses ``(s + 1) / warmup_steps`` instead of ``s / warmup_steps``, so the first
update does not run at learning rate 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable

WARMUP_STYLES = ("constant", "cosine")


def lr_multiplier(
    warmup_steps: int,
    style: str = "constant",
    total_steps: int = 1,
    min_lr_ratio: float = 0.0,
    num_cycles: float = 0.5,
) -> Callable[[int], float]:
    """The factor applied to the peak learning rate at each optimizer step (for ``LambdaLR``).

    Args:
        warmup_steps: linear warm-up length in optimizer steps (0: none).
        style: ``constant`` (the peak after warm-up) or ``cosine`` (decay to ``min_lr_ratio``).
        total_steps: optimizer steps over the whole run (the cosine horizon).
        min_lr_ratio: the cosine floor, as a fraction of the peak.
        num_cycles: cosine cycles over the decay (0.5 = one half-wave, peak to floor).
    """
    if style not in WARMUP_STYLES:
        raise ValueError(f"unknown warmup_style {style!r} (known: {', '.join(WARMUP_STYLES)})")
    if not 0.0 <= min_lr_ratio <= 1.0:
        raise ValueError(f"min_lr_ratio must be in [0, 1], got {min_lr_ratio}")
    warmup = max(0, int(warmup_steps))
    decay = max(1, int(total_steps) - warmup)
    coef, intercept = (1.0 - min_lr_ratio) * 0.5, (1.0 + min_lr_ratio) * 0.5

    def multiplier(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        if style == "constant":
            return 1.0
        progress = min(1.0, (step - warmup) / decay)
        return max(0.0, coef * math.cos(math.pi * num_cycles * 2.0 * progress) + intercept)

    return multiplier
