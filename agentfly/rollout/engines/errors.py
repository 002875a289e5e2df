"""What the engine pool raises when an engine cannot start, dies, or passes a deadline."""

from __future__ import annotations

import re


class EngineStartError(RuntimeError):
    """An engine actor did not come up: its constructor failed, or the start deadline passed."""


class EngineLostError(RuntimeError):
    """An engine actor died or stopped answering; the pool serves on without it."""


class EngineTimeoutError(EngineLostError, TimeoutError):
    """An engine call passed its deadline; the pool stops that engine and serves on without it."""


_ERROR_LINE = re.compile(r"^\w*(Error|Exception|Interrupt)\b.*")


def summarize_ray_error(exc: BaseException, limit: int = 500) -> str:
    """One line on why a Ray actor failed: the exception its constructor raised, else Ray's words.

    A creation-task failure ends with the original ``SomeError: message`` line; a killed worker
    starts with Ray's ``The actor died ...`` and names the exit type further down.
    """
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    errors = [line for line in lines if _ERROR_LINE.match(line)]
    if errors:
        text = errors[-1]
    else:
        text = lines[0]
        exit_type = next((line for line in lines if "Worker exit type" in line), None)
        if exit_type is not None:
            text += " " + exit_type.split(" Worker exit detail")[0].split(". ", 1)[-1]
    return text if len(text) <= limit else text[: limit - 3] + "..."
