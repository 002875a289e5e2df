"""An iteration with nothing to learn from is said once and counted: every GRPO group scoring
alike gives every advantage 0, and the update would otherwise pass in silence."""

from __future__ import annotations

import logging

import pytest

from agentfly.callbacks.advantage import AdvantageCallback, equal_reward_share
from tests.modules.one_update import CHAINS, EQUAL_REWARDS, fit_once, make_batch


def test_the_share_of_groups_whose_chains_scored_alike():
    # group 0: 1, 1 (alike); group 1: 0, 1; group 2: 0.5 alone (alike)
    assert equal_reward_share([1.0, 1.0, 0.0, 1.0, 0.5], [0, 0, 1, 1, 2]) == pytest.approx(2 / 3)
    assert equal_reward_share([], []) == 0.0


@pytest.mark.parametrize(("chains", "warned", "equal"), [(EQUAL_REWARDS, 1, 1.0), (CHAINS, 0, 0.0)])
def test_equal_rewards_everywhere_are_said_once_and_counted(tiny_model_dir, caplog, chains, warned, equal):
    with caplog.at_level(logging.WARNING, logger="agentfly"):
        _, metrics = fit_once(tiny_model_dir, make_batch(chains), [AdvantageCallback("grpo")])
    said = [r.getMessage() for r in caplog.records if "no learning signal" in r.getMessage()]
    assert len(said) == warned
    if warned:
        assert "every advantage is 0 (100% of its groups" in said[0] and "agentfly sft" in said[0]
    assert metrics["training/no_signal_iterations"] == warned
    assert metrics["training/equal_reward_groups"] == equal
