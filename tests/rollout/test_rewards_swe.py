"""The offline SWE task and its reward: every bug kind fails its tests as planted and passes them
fixed, the same seed makes the same row, ``swe_test_reward`` scores a fixed repository 1 and an
unfixed one 0 from the chain's workspace record (with the row's tests put back), and AgentFly's
image rewards are refused when the config is composed, naming what they need."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from agentfly.config.plugins import reward_sandbox_error
from agentfly.data.buggy_repos import BUG_KINDS, TEST_COMMAND, make_dataset, make_task
from agentfly.rollout.execution import sandbox_isolation
from agentfly.rollout.rewards import REWARDS, compute_reward
from agentfly.rollout.rewards.swe_rewards import SWE_OPT_IN_KEY, run_tests, swe_image_refusal
from tests.config.cases import BASE, error_of

needs_bwrap = pytest.mark.needs_bwrap  # skipped, saying why, where bubblewrap cannot run


def fixed(task):
    bug = task["bug"]
    return task["repo"][bug["path"]].replace(bug["buggy"], bug["fixed"])


def chain(changed=None, deleted=(), truncated=False):
    """A trajectory whose workspace record holds these changes."""
    record = {"env": "swe_workspace", "changed": changed or {}, "deleted": list(deleted),
              "unreadable": [], "truncated": truncated, "return": 0.0, "steps": []}
    return SimpleNamespace(environments={"swe_workspace": record})


def test_the_same_seed_makes_the_same_row_and_the_kinds_take_turns(tmp_path):
    assert make_task(7) == make_task(7) and make_task(7) != make_task(13)
    assert [make_task(s)["bug"]["kind"] for s in range(6)] == list(BUG_KINDS)
    task = make_task(2)
    bug = task["bug"]
    assert task["repo"][bug["path"]].count(bug["buggy"]) == 1 and bug["fixed"] not in task["repo"][bug["path"]]
    assert task["test_command"] == TEST_COMMAND and all(p in task["repo"] for p in task["test_files"])
    assert bug["buggy"] not in task["question"]  # the issue says what goes wrong, not where
    splits = make_dataset(tmp_path, train=3, val=2, seed=10)
    assert json.loads((tmp_path / "swe_val.json").read_text()) == splits["val"] == [make_task(13), make_task(14)]
    with pytest.raises(ValueError, match="unknown bug kind"):
        make_task(0, kind="typo")


@needs_bwrap
@pytest.mark.parametrize("kind", BUG_KINDS)
def test_every_bug_kind_fails_its_tests_as_planted_and_passes_them_fixed(kind):
    task = make_task(100, kind=kind)
    assert run_tests(task["repo"], task["test_command"], "bwrap")["reward"] == 0.0
    repo = {**task["repo"], task["bug"]["path"]: fixed(task)}
    assert run_tests(repo, task["test_command"], "bwrap") == {"reward": 1.0, "tests_passed": 1.0, "timed_out": 0.0}


@needs_bwrap
def test_swe_test_reward_scores_the_chains_changes_on_a_fresh_copy_with_the_rows_tests():
    task = make_task(5)
    path, test = task["bug"]["path"], task["test_files"][1]

    def score(trajectory):
        return compute_reward("swe_test_reward", "", trajectory=trajectory, row=task)

    assert score(chain({path: fixed(task)})).reward == 1.0
    assert score(chain()).reward == 0.0  # nothing changed: the bug is still there
    # the test file deleted or rewritten: the row's test runs all the same
    assert score(chain({path: fixed(task)}, deleted=[test])).reward == 1.0
    assert score(chain({test: "pass\n"})).reward == 0.0
    # the whole package deleted: the tests cannot import it
    assert score(chain(deleted=[path])).reward == 0.0
    assert score(chain({path: fixed(task)}, truncated=True)).reward == 0.0  # a cut record counts for nothing
    missing = compute_reward("swe_test_reward", "", trajectory=SimpleNamespace(environments={}), row=task)
    assert missing.failed and "run_shell_command" in missing.error


def test_the_image_rewards_are_refused_naming_the_image_and_swe_test_reward_its_opt_in(monkeypatch):
    for name in ("r2e_gym_reward", "swe_reward"):
        assert name not in REWARDS and "container image per data row" in swe_image_refusal(name)
    assert swe_image_refusal("swe_test_reward") is None
    error = error_of([*BASE, "agent.init_config.reward_name=r2e_gym_reward"])
    assert "agent.init_config.reward_name='r2e_gym_reward' is not supported" in error
    assert "R2E-Gym container image" in error and "swe_test_reward" in error
    monkeypatch.setattr(sandbox_isolation, "bwrap_problem", lambda: "bwrap (bubblewrap) is not on PATH")
    refused = reward_sandbox_error("agent.init_config.reward_name", REWARDS, "swe_test_reward")
    assert "bwrap (bubblewrap) is not on PATH" in refused and SWE_OPT_IN_KEY in refused
    assert reward_sandbox_error("k", REWARDS, "swe_test_reward_unsafe_rlimits_only") is None
