"""Rewards that end-to-end tests register, in a module that imports nothing heavy.

A fit's worker processes import the module that defines a reward they run (the function travels
by reference), and every plug-in of ``agent.init_config.plugins`` when they start. Defined here,
each worker imports this module and ``agentfly.rollout.rewards`` only, not a test module with
torch, Lightning and the CLI behind it.
"""

from __future__ import annotations

from typing import Any

from agentfly.rollout.rewards import reward

CHECKSUM = "tests_checksum_reward"
FINGERPRINT = "char_code_fingerprint"


@reward(name=CHECKSUM)
def checksum_reward(prediction: str) -> float:
    """In (0, 1], from the characters of the response: a deterministic function of the text."""
    return (sum(map(ord, prediction)) % 101 + 1) / 101


@reward(FINGERPRINT)
def char_code_fingerprint(prediction: str) -> float:
    """The response's mean code point / 1000: a fingerprint of the text, so the validation
    reward differs whenever the greedy responses do (and GRPO gets unequal rewards to act on)."""
    return sum(map(ord, prediction)) / max(1, len(prediction)) / 1000


@reward(name="probe_even_token_share", runs_in="thread")  # in the trainer: no worker to start
def probe_even_token_share(trajectory: Any = None) -> float:
    """Share of the chain's sampled tokens (loss mask 1) whose id is even; 0 without any (see
    :mod:`tests.probes`)."""
    ids = [i for i, m in zip(trajectory.response_ids, trajectory.loss_mask, strict=True) if m]
    return sum(1 for i in ids if i % 2 == 0) / len(ids) if ids else 0.0


@reward(name="fails_on_rank_1", runs_in="thread")  # in the trainer process, which knows its rank
def fails_on_rank_1(prediction: str) -> float:
    """Scores 0.5 on every rank but rank 1 of a process group, where it raises (a broken reward
    on one rank: :mod:`tests.test_ddp`)."""
    import torch

    if torch.distributed.is_available() and torch.distributed.is_initialized() and torch.distributed.get_rank() == 1:
        raise RuntimeError("this reward fails on rank 1")
    return 0.5
