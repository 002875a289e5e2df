"""Agent loops over the scripted engine (it replays the turns it is given), for the tests of the
loop and of what rides on it."""

from __future__ import annotations

import json

from agentfly.rollout.agent_loop import AgentLoop
from agentfly.rollout.agents import get_agent
from agentfly.rollout.engines import EnginePool
from agentfly.rollout.engines import scripted as _scripted  # noqa: F401  (registers "scripted")
from agentfly.rollout.templates import get_template
from agentfly.rollout.tools import get_tool


def call(name, **args):
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


def make_loop(model_dir, script, *, tools=("calculator", "answer"), agent="hermes", template="qwen2.5", **kw):
    pool = EnginePool("scripted", 0, engine_kwargs={"model": str(model_dir), "script": script})
    tok = pool.tokenizer
    return AgentLoop(
        engine=pool,
        tokenizer=tok,
        template=get_template(template),
        agent=get_agent(agent, [get_tool(t) for t in tools]),
        reward="math_equal_reward_tool",
        **kw,
    )


ROWS = [
    {"question": "What is 12*34?", "answer": "408"},
    {"question": "What is 7+8?", "answer": "15"},
]
