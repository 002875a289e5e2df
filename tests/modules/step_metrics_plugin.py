"""The ``first_call_fails`` engine: its first generate call writes a call to a tool that does not
exist, every later call a plain answer, so a run's first iteration counts one failure kind and
the later ones none."""

from __future__ import annotations

import json

from agentfly.rollout.engines.base import register_engine
from agentfly.rollout.engines.scripted import ScriptedEngine

UNKNOWN_CALL = "<tool_call>\n" + json.dumps({"name": "no_such_tool", "arguments": {}}) + "\n</tool_call>"


@register_engine("first_call_fails")
class FirstCallFails(ScriptedEngine):
    def __init__(self, model, **kwargs) -> None:
        kwargs.pop("script", None)
        super().__init__(model, script=["3"], **kwargs)
        self.calls = 0

    def generate(self, prompts, sampling):
        self.calls += 1
        return super().generate(prompts, sampling)

    def turn_text(self, turn: int) -> str:
        return UNKNOWN_CALL if self.calls == 1 else "3"
