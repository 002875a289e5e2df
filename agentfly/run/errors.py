"""What a command answers with one line and exit status 2 (anything else is a bug, raised with
its traceback, exit status 1): what the user gave (:class:`~agentfly.core.errors.InputError`, a
config error among them) or a machine that cannot run it (an engine that does not start or is
lost). ``agentfly fit``/``validate``, ``rollout`` and ``serve`` catch these alike."""

from __future__ import annotations

from agentfly.core.errors import InputError
from agentfly.rollout.engines.errors import EngineLostError, EngineStartError

USER_ERRORS: tuple[type[BaseException], ...] = (InputError, EngineStartError, EngineLostError)
