"""AgentFly's training commands (tests/config/verl_commands.py) on this 2-core CPU machine, with their own GPU topology
(`trainer.n_gpus_per_node`, `tensor_model_parallel_size`, batch and micro-batch sizes): the model
swapped for a tiny local one, the data for small local files (batch sizes scaled down where they
exceed the data), `rollout.name=hf` for vLLM and fewer steps. Each parses, and the GSM8K,
ReAct-search and code commands train on the CPU fallback, which says what it reduced, writing
metrics and a checkpoint. With `adv_estimator=gae` a critic trains too."""

from __future__ import annotations

import json

import pytest
import torch

from agentfly.cli import load_config, main
from agentfly.models.tiny import build_tiny_model
from tests.config.verl_commands import (
    GUIDE_CODE,
    GUIDE_GSM8K,
    GUIDE_REACT_SEARCH,
    KEY_REFERENCE_WEBSHOP,
)
from tests.fit_runs import probe_args
from tests.fit_runs import rows as metrics_rows
from tests.probes import assert_updates_follow_the_advantages, read_records

TINY_KEYS = ("agent.init_config.model_name_or_path", "actor_rollout_ref.model.path", "critic.model.path")


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    root = tmp_path_factory.mktemp("commands")
    model = build_tiny_model(root / "model", initializer_range=0.2)
    math = [{"question": f"Tom has {a} apples and buys {b} more. How many?", "answer": f"{a}+{b}={a + b}\n#### {a + b}"} for a, b in [(3, 4), (5, 6), (2, 9), (7, 7)]]
    qa = [{"question": q, "answer": [a]} for q, a in [("Who wrote Hamlet?", "Shakespeare"), ("What is the capital of France?", "Paris"), ("Which planet is red?", "Mars"), ("What gas do plants absorb?", "carbon dioxide")]]
    code = [{"question": f"Write add{i}(a, b) returning a + b + {i}.", "test_list": [f"assert add{i}(1, 2) == {3 + i}"]} for i in range(4)]
    for name, rows in (("math", math), ("qa", qa), ("code", code)):
        (root / f"{name}.json").write_text(json.dumps(rows))
    corpus = root / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps({"text": t}) for t in ["Hamlet was written by William Shakespeare.", "Paris is the capital of France.", "Mars is called the red planet."]))
    return root, model, corpus


def localize(command: list[str], replace: dict[str, str], extra: list[str]) -> list[str]:
    """The command's arguments with some values replaced (keeping its spelling), then ``extra``."""
    out = []
    for arg in command:
        key = arg.split("=", 1)[0]
        out.append(f"{key}={replace[key]}" if key in replace else arg)
    return out + extra


def local_args(command, data, local_dir, model, corpus=None, extra=(), steps=2):
    """The command with a local model and data; batch sizes scaled to 2 prompts where they exceed
    the data; `transformers` for `vllm`; the command's GPU counts, tensor parallelism and micro-batches kept."""
    chains = int(next(a.split("=")[1] for a in command if a.split("=")[0].endswith("num_chains")))
    replace = {k: str(model) for k in TINY_KEYS}
    replace.update({
        "data.train_files": str(data), "data.val_files": str(data),
        "data.train_batch_size": "2",
        "actor_rollout_ref.actor.ppo_mini_batch_size": str(2 * chains),
        "critic.ppo_mini_batch_size": str(2 * chains),
        "agent.run_config.generation_config.max_tokens": "12",
        "actor_rollout_ref.rollout.name": "transformers",
        "trainer.total_training_steps": str(steps), "trainer.save_freq": str(steps),
        "trainer.test_freq": str(steps),
        # the tiny model's context (a longer one is refused: no engine serves it)
        "agent.init_config.max_model_len": "2048",
    })
    more = ["actor_rollout_ref.actor.optim.lr=1e-3", f"trainer.default_local_dir={local_dir}"]
    if corpus is not None:
        more.append(f"agent.init_config.tool_config.search.corpus_path={corpus}")
    return localize(command, replace, more + list(extra))


@pytest.mark.parametrize(
    "name, command, data, with_corpus, engines, says",
    [
        # the command's 1 GPU (one CPU process, as asked: no warning); the engine in this process
        ("gsm8k", GUIDE_GSM8K, "math", False, "0", []),
        # 8 GPUs and tensor parallelism 2: one CPU process, the engine not split
        ("react_search", GUIDE_REACT_SEARCH, "qa", True, "0",
         ["trainer.n_gpus_per_node=8 -> 1 CPU process", "tensor_model_parallel_size=2 -> 1"]),
        # 4 GPUs, the engines left to the machine: one engine in a Ray pool, no hang
        pytest.param("code", GUIDE_CODE, "code", False, None,
                     ["trainer.n_gpus_per_node=4 -> 1 CPU process", "one rollout engine"],
                     marks=pytest.mark.needs_bwrap),
    ],
)
def test_an_agentfly_command_trains_on_the_cpu(local, tmp_path, monkeypatch, ray_tmpdir, caplog, name, command, data, with_corpus, engines, says):
    import logging

    if torch.cuda.is_available():
        pytest.skip("checks the CPU fallback")
    root, model, corpus = local
    monkeypatch.setenv("WANDB_MODE", "offline")  # AgentFly's commands log to wandb
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    run = tmp_path / "run"
    extra = [] if engines is None else [f"actor_rollout_ref.rollout.num_engines={engines}"]
    args = local_args(command, root / f"{data}.json", run, model, corpus if with_corpus else None, extra)
    for key in ("trainer.n_gpus_per_node", "actor_rollout_ref.rollout.tensor_model_parallel_size"):
        assert any(a.startswith(key + "=") for a in args)  # the command's own value, not replaced
    with caplog.at_level(logging.WARNING, logger="agentfly"):
        assert main(["train", *args]) == 0
    said = " ".join(r.getMessage() for r in caplog.records)
    for phrase in says:
        assert phrase in said, (phrase, said)
    if not says:  # the command's one GPU is one CPU process: nothing reduced, nothing said
        assert "no GPU" not in said, said
    iterations = [float(r["training/iteration"]) for r in metrics_rows(run) if r.get("training/iteration")]
    assert iterations == [1.0, 2.0]
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)["agentfly_iteration"] == 2
    assert (run / "hf_actor" / "model.safetensors").exists()


def test_gae_trains_a_critic(local, tmp_path, monkeypatch):
    root, model, _ = local
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    run, probe = tmp_path / "run", tmp_path / "probe"
    extra = ["algorithm.adv_estimator=gae", "actor_rollout_ref.rollout.num_engines=0", *probe_args(probe)]
    args = local_args(GUIDE_GSM8K, root / "math.json", run, model, extra=extra, steps=3)
    assert main(["train", *args]) == 0
    losses = [float(r["critic/vf_loss"]) for r in metrics_rows(run) if r.get("critic/vf_loss")]
    assert len(losses) == 3
    [records] = read_records(probe)
    assert [r["iteration"] for r in records] == [1, 2, 3]
    for rec in records:  # each critic update moved the values on its batch toward the returns
        assert rec["value_error_after"] < rec["value_error_before"], rec
    assert_updates_follow_the_advantages(records)
    state = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
    assert any(k.startswith("critic.") for k in state)


def test_webshop_command_parses_to_agentflys_tool_and_reward(local, tmp_path):
    """It trains on the generated catalog in tests/envs/test_env_fits.py."""
    root, model, _ = local
    args = local_args(KEY_REFERENCE_WEBSHOP, root / "math.json", tmp_path / "run", model)
    cfg = load_config(args)
    assert cfg.agent.init_config.agent_type == "action"
    assert list(cfg.agent.init_config.tools) == ["webshop_browser_action"]
    assert cfg.agent.init_config.reward_name == "webshop_reward"
    assert cfg.agent.init_config.system_prompt.startswith("You are an autonomous shopping agent")
