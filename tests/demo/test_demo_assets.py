"""The demo's shipped assets: the task files are what their script makes, the splits are
disjoint, the tiny model loads offline, is small, and rolls out through the real agent loop with
well-formed tool calls, token for token in the format it was warm-started on."""

from __future__ import annotations

import importlib.util
import json
import random
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"
DEMO = ROOT / "agentfly" / "demo"
MODEL = DEMO / "model"
TEMPLATE = "qwen2.5-no-system-tool"


def load_script(name: str):
    path = SCRIPTS / f"{name}.py"
    if not path.exists():
        pytest.skip(f"{path} is not in this checkout")
    if str(SCRIPTS) not in sys.path:  # make_demo_model imports make_demo_data as a sibling
        sys.path.insert(0, str(SCRIPTS))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rows(split: str) -> list[dict[str, str]]:
    return json.loads((DEMO / "data" / f"{split}.json").read_text(encoding="utf-8"))


def test_shipped_task_files_are_what_the_script_generates(tmp_path):
    script = load_script("make_demo_data")
    script.write_splits(tmp_path)
    for name in ("train.json", "val.json", "sft_train.jsonl", "sft_val.jsonl"):
        shipped = (DEMO / "data" / name).read_bytes()
        assert (tmp_path / name).read_bytes() == shipped, name


def test_splits_do_not_overlap_and_answers_are_exact():
    from agentfly.rollout.tools.calculator import calculate

    train, val = rows("train"), rows("val")
    assert len(train) == 2000 and len(val) == 100
    questions = [r["question"] for r in train + val]
    assert len(set(questions)) == len(questions)
    for row in random.Random(0).sample(train, 50) + val:
        expression = row["question"].removeprefix("What is ").removesuffix("?")
        assert calculate(expression) == row["answer"]


def test_model_loads_offline_and_is_small(monkeypatch):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    size = sum(f.stat().st_size for f in MODEL.iterdir() if f.is_file())
    assert size < 5 * 2**20, size
    model = AutoModelForCausalLM.from_pretrained(MODEL, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(MODEL, local_files_only=True)
    assert model.config.model_type == "qwen2" and model.config.num_hidden_layers == 2
    assert model.get_input_embeddings().num_embeddings == len(tokenizer)
    assert [
        tokenizer.decode([i]) for i in tokenizer.encode("1234", add_special_tokens=False)
    ] == list("1234")


def test_tokenizer_chat_template_renders_like_the_named_template():
    from transformers import AutoTokenizer

    from agentfly.rollout.templates import get_template

    tokenizer = AutoTokenizer.from_pretrained(MODEL)
    messages = [
        {"role": "user", "content": "What is 2*3?"},
        {
            "role": "assistant",
            "content": '<tool_call>\n{"name": "calculator", "arguments": {"expression": "2*3"}}\n</tool_call>',
        },
        {"role": "tool", "content": "6"},
    ]
    ours = get_template(TEMPLATE).render(messages, add_generation_prompt=True)
    assert (
        tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == ours
    )


def test_greedy_rollout_calls_the_tools_in_the_warm_start_format():
    from agentfly.rollout.agent_loop import AgentLoop
    from agentfly.rollout.agents import get_agent
    from agentfly.rollout.engines import EnginePool
    from agentfly.rollout.templates import get_template
    from agentfly.rollout.tools import get_tool

    maker = load_script("make_demo_model")
    template = get_template(TEMPLATE)
    val = rows("val")[:4]
    pool = EnginePool("transformers", 0, engine_kwargs={"model": str(MODEL)})
    try:
        tokenizer = pool.tokenizer
        loop = AgentLoop(
            engine=pool,
            tokenizer=tokenizer,
            template=template,
            agent=get_agent("hermes", [get_tool("calculator"), get_tool("answer")]),
            reward="math_equal_reward_tool",
            max_turns=3,
            max_tokens=32,
        )
        trajs = loop.run(val, greedy=True)
    finally:
        pool.shutdown()
    matched = 0
    for row, t in zip(val, trajs, strict=True):
        assert t.finish_reason == "answer", (t.finish_reason, t.messages)
        assert [c.name for c in t.tool_calls] == ["calculator", "answer"], t.messages
        assert all(c.ok for c in t.tool_calls), t.tool_calls
        assert t.reward in (0.1, 1.0)
        if t.reward == 1.0 and t.tool_calls[0].arguments == {"expression": row["question"][8:-1]}:
            # a clean chain is token for token a noise-free warm-start trace
            segments = maker.trace_segments(
                row["question"][8:-1], template, random.Random(0), noise=0.0
            )
            assert maker.encode_trace(tokenizer, segments)[0] == t.input_ids
            matched += 1
    assert matched >= 1
