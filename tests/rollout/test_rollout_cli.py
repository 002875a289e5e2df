"""`agentfly rollout`: the same config as training, JSONL out, and bad input named clearly."""

from __future__ import annotations

import json

import pytest

from agentfly.cli import main
from agentfly.models.tiny import build_tiny_model


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    model = build_tiny_model(root / "model", initializer_range=0.2)
    data = root / "train.json"
    data.write_text(json.dumps([{"question": "What is 2+3?", "answer": "5"}, {"question": "What is 4*4?", "answer": "16"}]))
    return root, model, data


def base_args(model, data, extra=()):
    return [
        "rollout",
        f"data.train_files={data}",
        f"agent.init_config.model_name_or_path={model}",
        "agent.init_config.agent_type=hf",
        "agent.init_config.tools=[calculator,answer]",
        "agent.init_config.template=qwen2.5",
        "agent.init_config.reward_name=math_equal_reward_tool",
        "agent.run_config.max_turns=2",
        "--agent.num_chains",  # a LightningCLI-style flag, and AgentFly's other spelling
        "2",
        "agent.run_config.generation_config.max_tokens=16",
        "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.rollout.num_engines=0",  # in-process engine: no Ray in this test
        *extra,
    ]


def test_rollout_writes_one_line_per_chain_and_a_summary(setup, capsys):
    root, model, data = setup
    out = root / "out.jsonl"
    assert main([*base_args(model, data), f"--output={out}"]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 4  # 2 prompts x 2 chains
    for rec in lines:
        assert len(rec["response_ids"]) == len(rec["loss_mask"]) == len(rec["rollout_logprobs"])
        assert rec["finish_reason"] in {"answer", "no_tool_call", "max_turns", "max_model_len"}
        assert rec["reward"] is not None and rec["messages"][-1]["role"] == "assistant"
        assert "row" in rec and rec["row"]["answer"] in {"5", "16"}
    summary = json.loads(out.with_suffix(".summary.json").read_text())
    assert summary["chains"] == 4 and summary["prompts"] == 2
    assert "accuracy" in summary and "tool_calls_per_tool" in summary and "failures/tool" in summary
    assert json.loads(capsys.readouterr().out)["chains"] == 4


@pytest.mark.parametrize(
    "extra, message",
    [
        (["agent.init_config.tools=[calculator,telepathy]"], "telepathy"),
        (["agent.init_config.reward_name=no_such_reward"], "no_such_reward"),
        (["agent.init_config.template=qwen9"], "qwen9"),
        (["agent.init_config.tools=[search]", "agent.init_config.tool_config.search.corpus_path=/nonexistent/corpus.jsonl"], "/nonexistent/corpus.jsonl"),
        (["agent.run_config.max_turn=3"], "max_turns"),
    ],
)
def test_bad_names_and_paths_stop_with_an_error_naming_them(setup, capsys, extra, message):
    root, model, data = setup
    assert main([*base_args(model, data, extra), f"--output={root / 'bad.jsonl'}"]) == 2
    assert message in capsys.readouterr().err


def test_a_row_without_a_question_is_named(setup, capsys):
    root, model, _ = setup
    bad = root / "bad.jsonl"
    bad.write_text('{"question": "ok?", "answer": "1"}\n{"answer": "2"}\n')
    assert main([*base_args(model, bad), f"--output={root / 'x.jsonl'}"]) == 2
    err = capsys.readouterr().err
    assert "row 2" in err and "question" in err  # the second line and str(bad) in err


def test_a_bug_inside_a_rollout_is_raised_with_its_traceback(setup, monkeypatch):
    """Only what the user gave is answered with one line and status 2; a bug keeps its traceback
    (before, any RuntimeError, KeyError or OSError became a one-line "config" error)."""
    import agentfly.rollout.runner as runner

    def broken(*args, **kwargs):
        raise KeyError("a bug in the rollout")

    monkeypatch.setattr(runner, "run_rollout", broken)
    root, model, data = setup
    with pytest.raises(KeyError, match="a bug in the rollout"):
        main([*base_args(model, data), f"--output={root / 'bug.jsonl'}"])


def test_missing_data_file_is_named(setup, capsys):
    root, model, _ = setup
    assert main([*base_args(model, root / "nope.json"), f"--output={root / 'x.jsonl'}"]) == 2
    assert "nope.json" in capsys.readouterr().err


def test_rollout_with_the_vllm_engine(tmp_path, capsys, monkeypatch):
    pytest.importorskip("vllm")
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path / "vllm-cache"))
    model = build_tiny_model(tmp_path / "model", hidden_size=128, head_dim=32, initializer_range=0.2)
    data = tmp_path / "train.jsonl"
    data.write_text('{"question": "What is 2+3?", "answer": "5"}\n')
    out = tmp_path / "out.jsonl"
    args = base_args(model, data, ["actor_rollout_ref.rollout.name=vllm", "agent.init_config.max_model_len=2048"])
    assert main([*args, f"--output={out}"]) == 0, capsys.readouterr().err
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 2
    for rec in lines:
        n = sum(rec["loss_mask"])
        assert n > 0 and len(rec["rollout_logprobs"]) == len(rec["response_ids"])
        assert all(lp <= 0 for lp, m in zip(rec["rollout_logprobs"], rec["loss_mask"]) if m)


def test_exit_status_is_1_when_every_chain_failed(setup, capsys, monkeypatch):
    import agentfly.rollout.runner as runner

    root, model, data = setup
    monkeypatch.setattr(
        runner, "run_rollout",
        lambda *a, **k: {"chains": 2, "failures/chain": 2, "first_error": "EngineDeadError: boom"},
    )
    assert main([*base_args(model, data), f"--output={root / 'f.jsonl'}"]) == 1
    assert "EngineDeadError: boom" in capsys.readouterr().err


def test_rollout_with_every_default_runs_what_the_machine_holds(setup, tmp_path, ray_tmpdir, caplog):
    """Only data and a model named: the defaults ask for 8 GPUs (8 engines); without a GPU the
    run takes one engine in a Ray pool, says so, and finishes."""
    import logging

    import torch

    if torch.cuda.is_available():
        pytest.skip("checks the CPU fallback")
    _, model, data = setup
    out = tmp_path / "out.jsonl"
    args = ["rollout", f"data.train_files={data}", f"agent.init_config.model_name_or_path={model}",
            "agent.run_config.generation_config.max_tokens=4", f"--output={out}"]
    with caplog.at_level(logging.WARNING, logger="agentfly"):
        assert main(args) == 0
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "no GPU: running on the CPU (trainer.n_gpus_per_node=8 -> 1 CPU process" in said
    assert "no GPU: one rollout engine (trainer.n_gpus_per_node=8 asked for more)" in said
    assert len(out.read_text().splitlines()) == 2  # 2 prompts x 1 chain
