"""User code that misbehaves on some calls, for the collateral-failure tests
(:mod:`tests.faults.test_collateral`), loaded as a run's plug-in
(``agent.init_config.plugins=[tests.faults.flaky]``).

Each call draws its own fate (``FLAKY_RATE``, 0.3 by default) and, when it misbehaves, first
leaves one file in the directory ``FLAKY_DIR``: the files count the calls that really
misbehaved, whatever the run made of them.

- ``flaky_hang`` and ``flaky_exit`` answer ``x + 1``, or hang / end their process
  (``os._exit``); ``always_hang`` always hangs, ``plus_one`` never misbehaves.
- ``flaky_reward`` hangs, or scores 1 when the answer is right; ``exact_answer`` never
  misbehaves (the tool cases' reward: unlike the demo's math reward it preloads nothing, so a
  replacement worker starts in a fraction of a second).
- The ``flaky_script`` engine (no model): a chain's first turn calls the tools named by
  ``FLAKY_CALLS`` (one, or ``healthy|hung``: the hung one on a ``FLAKY_RATE`` share of the
  chains, drawn per chain, the healthy one on the others), its second answers.
"""

from __future__ import annotations

import json
import os
import random
import time
import uuid
from pathlib import Path

from agentfly.rollout.engines.base import register_engine
from agentfly.rollout.engines.scripted import ScriptedEngine
from agentfly.rollout.rewards import reward
from agentfly.rollout.tools import tool

TIMEOUT_S = 1.0  # every misbehaving call costs this much of a worker's time


def _rate() -> float:
    return float(os.environ.get("FLAKY_RATE", "0.3"))


def _record(kind: str) -> None:
    """One file per misbehaving call, written before it misbehaves."""
    (Path(os.environ["FLAKY_DIR"]) / f"{kind}-{uuid.uuid4().hex}").write_text(str(os.getpid()))


def _misbehaves(kind: str) -> bool:
    if random.random() >= _rate():
        return False
    _record(kind)
    return True


def _hang() -> None:
    while True:
        time.sleep(1)


@tool(timeout=TIMEOUT_S)
def flaky_hang(x: int) -> str:
    """Answers x + 1, or hangs.

    Args:
        x: a number.
    """
    if _misbehaves("hang"):
        _hang()
    return str(x + 1)


@tool(timeout=TIMEOUT_S)
def flaky_exit(x: int) -> str:
    """Answers x + 1, or ends the process it runs in.

    Args:
        x: a number.
    """
    if _misbehaves("exit"):
        os._exit(3)
    return str(x + 1)


@tool(timeout=TIMEOUT_S)
def always_hang(x: int) -> str:
    """Never answers.

    Args:
        x: a number.
    """
    _record("hang")
    _hang()
    return ""


@tool(timeout=TIMEOUT_S)
def plus_one(x: int) -> str:
    """Answers x + 1.

    Args:
        x: a number.
    """
    return str(x + 1)


@reward(name="flaky_reward", timeout=TIMEOUT_S)
def flaky_reward(prediction: str, answer: str) -> float:
    """1 for the right answer, 0 otherwise; or hangs."""
    if _misbehaves("reward_hang"):
        _hang()
    return float(prediction.strip() == str(answer).strip())


@reward(name="exact_answer", timeout=TIMEOUT_S)
def exact_answer(prediction: str, answer: str) -> float:
    """1 for the right answer, 0 otherwise."""
    return float(prediction.strip() == str(answer).strip())


def _call(name: str, **args) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


@register_engine("flaky_script")
class FlakyScript(ScriptedEngine):
    """Turn 1 calls the ``FLAKY_CALLS`` tool(s) (see the module docstring); turn 2 answers."""

    def __init__(self, model, **kwargs) -> None:
        kwargs.pop("script", None)
        super().__init__(model, script=["", _call("answer", answer="42")], **kwargs)
        self.calls = os.environ["FLAKY_CALLS"].split("|")

    def turn_text(self, turn: int) -> str:
        if turn > 0:
            return super().turn_text(turn)
        if len(self.calls) == 1:
            return _call(self.calls[0], x=41)
        healthy, hung = self.calls
        return _call(hung if random.random() < _rate() else healthy, x=41)
