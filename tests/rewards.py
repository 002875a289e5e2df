"""Rewards that end-to-end tests register, in a module that imports nothing heavy.

A reward runs in a worker process, which imports the module defining it (the function travels by
reference): defined here, each worker of a fit imports this module and ``agentfly.rollout.rewards``
only, not a test module with torch, Lightning and the CLI behind it.
"""

from __future__ import annotations

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
