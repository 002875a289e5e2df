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


def assert_segment_is_what_the_engine_sampled(segment, recorded, calls):
    """``segment``'s ids are the last of ``calls`` given and sampled, and its trained tokens,
    log-probabilities and versions are each call's: ``recorded[k]`` is call ``k``'s (given ids,
    sampled ids), and call ``k`` reported log-probability ``-(k + 1) / 10`` and version ``k``."""
    last_given, last_sampled = recorded[calls[-1]]
    assert last_given + last_sampled == segment.input_ids  # nothing after the last turn
    trained = [k for k, m in enumerate(segment.loss_mask) if m]
    assert [segment.response_ids[k] for k in trained] == [i for c in calls for i in recorded[c][1]]
    assert [segment.rollout_logprobs[k] for k in trained] == [-(c + 1) / 10 for c in calls for _ in recorded[c][1]]
    assert [segment.policy_versions[k] for k in trained] == [c for c in calls for _ in recorded[c][1]]
