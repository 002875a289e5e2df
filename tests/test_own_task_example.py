"""The README's "Train on your own task" example (examples/own_task/): its config composes with
its plug-in, and a chain that looks the capital up and answers it is scored 1, a wrong one 0."""

from __future__ import annotations

import json
from pathlib import Path

from agentfly.cli import parse_config
from agentfly.core.plugins import load_plugins
from agentfly.rollout.agent_loop import AgentLoop
from agentfly.rollout.agents import get_agent
from agentfly.rollout.engines import EnginePool
from agentfly.rollout.engines import scripted as _scripted  # noqa: F401  (registers "scripted")
from agentfly.rollout.templates import get_template
from agentfly.rollout.tools import get_tool
from tests.rollout.scripted_loops import call

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "own_task"


def test_the_config_composes_with_its_plugin(tiny_model_dir, monkeypatch):
    monkeypatch.chdir(EXAMPLE.parents[1])  # the config's paths are from the repository's root
    cfg = parse_config([
        "--config", str(EXAMPLE / "config.yaml"),
        f"agent.init_config.model_name_or_path={tiny_model_dir}",
    ])
    init = cfg.agent.init_config
    assert list(init.tools) == ["capital_of", "answer"] and init.reward_name == "capital_match"
    assert cfg.algorithm.adv_estimator == "grpo"
    assert init.template == "qwen2.5" and "Qwen" not in init.system_prompt  # SmolLM2 is not told it is Qwen


def test_a_chain_that_looks_it_up_scores_1_and_a_wrong_answer_0(tiny_model_dir, monkeypatch):
    monkeypatch.chdir(EXAMPLE.parents[1])
    load_plugins(["./examples/own_task/capitals.py"])
    rows = [json.loads(line) for line in (EXAMPLE / "train.jsonl").read_text().splitlines()][:2]
    scores = {}
    for answer in ("right", "wrong"):
        script = [call("capital_of", country=rows[0]["question"].split(" of ")[1].rstrip("?")),
                  call("answer", answer=rows[0]["answer"] if answer == "right" else "Atlantis")]
        pool = EnginePool("scripted", 0, engine_kwargs={"model": str(tiny_model_dir), "script": script})
        loop = AgentLoop(
            engine=pool, tokenizer=pool.tokenizer, template=get_template("qwen2.5"),
            agent=get_agent("hermes", [get_tool("capital_of"), get_tool("answer")]),
            reward="capital_match", max_turns=3, num_chains=1,
        )
        (traj,) = loop.run(rows[:1])
        assert traj.tool_calls[0].observation == rows[0]["answer"]  # the tool's own lookup
        scores[answer] = traj.reward
    assert scores == {"right": 1.0, "wrong": 0.0}


def test_the_readme_snippet_that_checks_a_tool_and_a_reward_runs(monkeypatch, capsys):
    """The README's "Check the tool and the reward without a model", as printed there."""
    monkeypatch.chdir(EXAMPLE.parents[1])
    readme = (EXAMPLE.parents[1] / "README.md").read_text()
    section = readme.split("**Check the tool and the reward without a model.**", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(code, "README.md", "exec"), {})
    assert capsys.readouterr().out.strip() == "Paris 1.0"
