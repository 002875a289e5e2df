"""SWE rewards: ``swe_test_reward`` runs the row's tests on what the chain changed; AgentFly's
``r2e_gym_reward`` and ``swe_reward`` are refused when the config is composed, naming what they
need.

``swe_test_reward`` scores the offline SWE task (:mod:`agentfly.data.buggy_repos`; any row with
``repo``, ``test_command`` and ``test_files``): it takes the chain's record of its workspace
(``trajectory.environments["swe_workspace"]``, :meth:`~agentfly.rollout.tools.workspace
.Workspace.record`), applies the changed, created and deleted files to a fresh copy of the row's
``repo``, puts the row's ``test_files`` back as the row has them (an edited or deleted test
does not count), and runs ``test_command`` with bash in the sandbox, in that copy. The reward
is 1.0 when the command exits 0 within ``TEST_TIMEOUT_S``, else 0.0 (also for a record cut at
its size limit); extras: ``tests_passed`` (the same) and ``timed_out``. That is AgentFly's
``swe_reward`` rule (take the chain's patch, evaluate it in a fresh copy), with a command's exit
status as the verdict. It runs under bubblewrap (``sandbox_isolation="bwrap"``: refused at
compose time where bubblewrap cannot run); ``swe_test_reward_unsafe_rlimits_only`` is the
explicit opt-in to limits only.

``r2e_gym_reward`` (R2E-Gym's test run of the instance, in its container image) and
``swe_reward`` (SWE-smith's evaluation of the chain's git patch, in its image) need a container
image per row, enroot and the ``r2egym``/``swebench`` packages: :func:`swe_image_refusal` says
so, and the config is refused unless a plugin registers the name itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentfly.rollout.rewards.env_rewards import episode
from agentfly.rollout.rewards.registry import reward

TEST_TIMEOUT_S = 60.0
"""Wall-clock limit of one run of the row's tests (seconds)."""
SWE_TEST_TIMEOUT_S = TEST_TIMEOUT_S + 60.0
"""Timeout of the whole reward call (the copy, the run, the cleanup)."""
SWE_OPT_IN_KEY = "agent.init_config.reward_name=swe_test_reward_unsafe_rlimits_only"
TOOLS_HINT = "a SWE tool (run_shell_command, edit_file, ...)"
WORKSPACE_ENV = "swe_workspace"
"""The SWE tools' environment (:data:`agentfly.rollout.tools.workspace.WORKSPACE_ENV`)."""

_IMAGE_REWARDS = {
    "r2e_gym_reward": "runs the instance's tests in its R2E-Gym container image",
    "swe_reward": "evaluates the chain's git patch with SWE-smith in the instance's image",
}


def swe_image_refusal(name: object) -> str | None:
    """Why the SWE image reward ``name`` cannot run here (None: ``name`` is no such reward)."""
    what = _IMAGE_REWARDS.get(name) if isinstance(name, str) else None
    if what is None:
        return None
    return (
        f"AgentFly's {name} {what}: it needs a container image per data row (the row's "
        "image_id, under ENROOT_IMAGES_PATH), enroot and the r2egym and swebench packages, none "
        "of which agentfly runs; the offline SWE task (agentfly.data.buggy_repos) is scored by "
        "swe_test_reward"
    )


def patched_repo(
    repo: Mapping[str, str], record: Mapping[str, Any], test_files: Sequence[str]
) -> dict[str, str]:
    """The row's files with the chain's changes applied and the test files as the row has them."""
    files = {path: text for path, text in repo.items() if path not in set(record.get("deleted", ()))}
    files.update(record.get("changed", {}))
    files.update({path: repo[path] for path in test_files if path in repo})
    return files


def run_tests(
    repo: Mapping[str, str], test_command: str, isolation: str, timeout: float = TEST_TIMEOUT_S
) -> dict[str, float]:
    """``test_command`` on a fresh copy of ``repo`` in the sandbox: the reward and its extras.

    Raises:
        SandboxUnavailableError: ``isolation`` cannot run here.
    """
    # imported on first use: the tools package is not imported with the rewards
    from agentfly.rollout.tools.workspace import WorkspaceSettings, workspace_of

    settings = WorkspaceSettings(command_timeout=timeout, isolation=isolation)
    with workspace_of(repo, settings) as workspace:
        result = workspace.shell(test_command)
    passed = float(result.returncode == 0 and not result.timed_out)
    return {"reward": passed, "tests_passed": passed, "timed_out": float(result.timed_out)}


def _swe_test_reward(isolation: str) -> Any:
    """``swe_test_reward`` under ``isolation`` (see the module docstring)."""

    def score(
        trajectory: Any, repo: Mapping[str, str], test_command: str, test_files: Sequence[str] = ()
    ) -> dict[str, float]:
        record = episode(trajectory, WORKSPACE_ENV, "swe_test_reward", TOOLS_HINT)
        if record.get("truncated"):
            return {"reward": 0.0, "tests_passed": 0.0, "timed_out": 0.0}
        return run_tests(patched_repo(repo, record, test_files), test_command, isolation)

    score.sandbox_isolation = isolation
    score.sandbox_opt_in = SWE_OPT_IN_KEY
    return score


# The tests run in a sandboxed process of their own: the reward only drives it, in a thread.
swe_test_reward = reward(name="swe_test_reward", timeout=SWE_TEST_TIMEOUT_S, runs_in="thread")(
    _swe_test_reward("bwrap")
)
#: ``swe_test_reward`` with resource limits only, nothing contained (the explicit opt-in)
swe_test_reward_unsafe_rlimits_only = reward(
    name="swe_test_reward_unsafe_rlimits_only", timeout=SWE_TEST_TIMEOUT_S, runs_in="thread"
)(_swe_test_reward("unsafe_rlimits_only"))
