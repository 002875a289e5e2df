"""What a command answers with one line and exit status 2 (anything else is a bug, raised with
its traceback, exit status 1): what the user gave (:class:`~agentfly.core.errors.InputError`, a
config error among them), a machine that cannot run it (an engine that does not start or is
lost), or a rollout that cannot go on, its message naming why (a tool whose calls keep failing,
a batch in which every group had a failed chain). ``agentfly fit``/``validate``, ``rollout`` and
``serve`` catch these alike."""

from __future__ import annotations

from agentfly.core.errors import InputError
from agentfly.rollout.engines.errors import EngineLostError, EngineStartError
from agentfly.rollout.failures import FailedChainsError
from agentfly.rollout.tools.breaker import ToolBroken

USER_ERRORS: tuple[type[BaseException], ...] = (
    InputError, EngineStartError, EngineLostError, ToolBroken, FailedChainsError,
)
