"""Rank-local failures that every rank must stop on together.

Each rank rolls out its own prompts, then the update starts with collectives (the gradient
all-reduce under DDP, the all-gathers under FSDP). A rank whose rollout raised never gets there,
and its peers would wait inside those collectives until the process group's timeout (30 minutes
by default) and then fail with a watchdog message that names no cause. :func:`fail_together` is
the hand-over point: every rank reports whether its step failed, one small all-reduce, and if any
did, every rank raises, naming the failed ranks and their errors.
"""

from __future__ import annotations

import logging

import torch

log = logging.getLogger(__name__)


class PeerRankFailedError(RuntimeError):
    """Another rank's step failed; this rank stops with it instead of waiting on it."""


def _initialized() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def fail_together(error: Exception | None, what: str) -> None:
    """Called by every rank after ``what`` (e.g. "the rollout of iteration 3"), with the error
    it raised or None. Returns when no rank failed; else raises on every rank: its own error
    where it failed (with a note naming the other failed ranks), :class:`PeerRankFailedError`
    elsewhere. Without a process group (one rank) it raises ``error`` if given.

    The exchange is one all-reduce of one flag per call, and a gather of the messages only when a
    rank failed; it waits as long as the process group lets a collective wait.
    """
    if not _initialized() or torch.distributed.get_world_size() == 1:
        if error is not None:
            raise error
        return
    dist = torch.distributed
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
    flag = torch.tensor([0 if error is None else 1], dtype=torch.int32, device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    if not int(flag.item()):
        return
    rank, world = dist.get_rank(), dist.get_world_size()
    notes: list[str | None] = [None] * world
    dist.all_gather_object(notes, None if error is None else f"{type(error).__name__}: {error}")
    failed = {r: f"rank {r}: {note}" for r, note in enumerate(notes) if note is not None}
    if error is not None:
        others = [line for r, line in failed.items() if r != rank]
        if others:
            note = f"{what} failed on other ranks too: " + "; ".join(others)
            if hasattr(error, "add_note"):  # Python >= 3.11
                error.add_note(note)
            else:
                log.error(note)
        raise error
    raise PeerRankFailedError(
        f"{what} failed on {len(failed)} of {world} ranks, so rank {rank} stops with them "
        f"(the update's collectives would wait on them): " + "; ".join(failed.values())
    )
