"""End to end through the Ray engine pool: 4 prompts x 4 chains x 3 turns, every trajectory
checked for masks and token exactness; and the real transformers engine's logprobs recomputed
with a plain forward pass."""

from __future__ import annotations

import json
import shutil
import tempfile

import pytest
import torch

from agentfly.models.tiny import build_tiny_model
from agentfly.rollout.agent_loop import AgentLoop
from agentfly.rollout.agents import get_agent
from agentfly.rollout.engines import EnginePool
from agentfly.rollout.summary import summarize
from agentfly.rollout.templates import get_template
from agentfly.rollout.tools import get_tool


def call(name, **args):
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


ROWS = [{"question": f"What is {a}*{b}?", "answer": str(a * b)} for a, b in [(12, 34), (5, 6), (7, 8), (9, 11)]]


@pytest.fixture(scope="module")
def ray_tmp():
    import ray

    tmp = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    yield {"num_cpus": 2, "temp_dir": tmp}
    ray.shutdown()
    shutil.rmtree(tmp, ignore_errors=True)


def test_ray_pool_four_prompts_four_chains_three_turns(tmp_path, ray_tmp):
    model = build_tiny_model(tmp_path / "m")
    script = [call("calculator", expression="12*34"), call("calculator", expression="408-0"), call("answer", answer="408")]
    pool = EnginePool(
        "scripted", 2, engine_kwargs={"model": str(model), "script": script},
        num_cpus_per_engine=0.5, ray_init=ray_tmp,
    )
    try:
        tok = pool.tokenizer
        template = get_template("qwen2.5")
        agent = get_agent("hermes", [get_tool("calculator"), get_tool("answer")])
        loop = AgentLoop(
            engine=pool, tokenizer=tok, template=template, agent=agent,
            reward="math_equal_reward_tool", max_turns=3, num_chains=4,
        )
        trajs = loop.run(ROWS)
        stats = pool.stats()
    finally:
        pool.shutdown()
    assert len(trajs) == 16
    assert sorted({t.group_id for t in trajs}) == [0, 1, 2, 3]
    assert all(sum(1 for t in trajs if t.group_id == g) == 4 for g in range(4))
    assert sum(s["requests"] for s in stats) > 0 and all(s["requests"] > 0 for s in stats)
    for t in trajs:
        assert t.num_turns == 3 and t.finish_reason == "answer" and len(t.tool_calls) == 3
        text = template.render(t.messages, agent.template_tools())[:-1]  # drop the final "\n"
        assert tok.encode(text, add_special_tokens=False) == t.input_ids
        turns = "".join(m["content"] + template.end_of_turn for m in t.messages if m["role"] == "assistant")
        assert [i for i, m in zip(t.response_ids, t.loss_mask) if m] == tok.encode(turns, add_special_tokens=False)
        # exactly three sampled runs separated by two observation runs
        runs = [m for i, m in enumerate(t.loss_mask) if i == 0 or m != t.loss_mask[i - 1]]
        assert runs == [1, 0, 1, 0, 1]
    rewards = {t.group_id: t.reward for t in trajs}
    assert rewards[0] == 1.0 and rewards[1] == pytest.approx(0.1)
    s = summarize(trajs)
    assert s["chains"] == 16 and s["tool_calls_per_tool"] == {"calculator": 32, "answer": 16}
    assert s["accuracy"] == pytest.approx(0.25)


def test_hf_engine_logprobs_match_a_forward_pass(tmp_path):
    from transformers import AutoModelForCausalLM

    model_dir = build_tiny_model(tmp_path / "m", initializer_range=0.2)
    pool = EnginePool("transformers", 0, engine_kwargs={"model": str(model_dir), "seed": 3})
    loop = AgentLoop(
        engine=pool, tokenizer=pool.tokenizer, template=get_template("qwen2.5"),
        agent=get_agent("hermes", [get_tool("calculator")]), reward="math_equal_reward_tool",
        max_turns=2, num_chains=2, max_tokens=24, temperature=1.0,
    )
    trajs = loop.run(ROWS[:2])
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    worst = 0.0
    for t in trajs:
        ids = torch.tensor([t.input_ids])
        with torch.no_grad():
            logp = model(ids).logits.float().log_softmax(-1)[0, :-1]  # (L-1, V)
        target = ids[0, 1:]
        picked = logp.gather(-1, target.unsqueeze(-1)).squeeze(-1)[len(t.prompt_ids) - 1 :]
        mask = torch.tensor(t.loss_mask, dtype=torch.bool)
        gap = (picked[mask] - torch.tensor(t.rollout_logprobs)[mask]).abs().max().item()
        worst = max(worst, gap)
        assert mask.sum() > 0
    assert worst < 1e-4, worst
