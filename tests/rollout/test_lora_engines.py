"""The engines serve a LoRA actor after an update: given its adapter (the transformers engine,
vLLM's CPU build) or its merged weights (any engine), their log-probabilities of sampled tokens
equal the adapted actor's teacher-forced ones (≤ 1e-4, fp32)."""

from __future__ import annotations

import pytest
import torch

from agentfly.core.weights import adapter_payload, merged_state
from agentfly.models.tiny import build_tiny_model
from agentfly.modules.lora import apply_lora
from agentfly.modules.settings import LoraSettings
from agentfly.rollout.engines.base import SamplingParams, create_engine

ATOL = 1e-4
PROMPTS = [[5, 6, 7, 8, 9], [11, 12, 13]]
SAMPLING = SamplingParams(n=2, temperature=1.0, max_tokens=10, ignore_eos=True, seed=3)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    # head_dim 32: vLLM's CPU attention needs it
    return build_tiny_model(tmp_path_factory.mktemp("lora_engines"), hidden_size=128, num_heads=4, head_dim=32, initializer_range=0.2)


def adapted_actor(model_dir, rank: int = 4):
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    return apply_lora(base, LoraSettings(rank=rank, alpha=2.0 * rank, target_modules="all-linear"))


def update(actor, seed: int) -> None:
    """One AdamW step raising the log-likelihood of a random sequence: the adapter's B leaves 0."""
    ids = torch.randint(3, 200, (1, 24), generator=torch.Generator().manual_seed(seed))
    opt = torch.optim.AdamW([p for p in actor.parameters() if p.requires_grad], lr=5e-2)
    logp = actor(ids).logits[0, :-1].log_softmax(-1).gather(-1, ids[0, 1:, None])
    (-logp.mean()).backward()
    opt.step()
    actor.zero_grad()


def gap(engine, actor) -> float:
    """Largest |engine log p − actor log p| over sampled tokens of :data:`PROMPTS`."""
    worst = 0.0
    for prompt, outs in zip(PROMPTS, engine.generate(PROMPTS, SAMPLING), strict=True):
        for out in outs:
            ids = torch.tensor([prompt + out.token_ids])
            with torch.no_grad():
                logp = actor(ids).logits[0, :-1].float().log_softmax(-1)  # (L-1, V)
            picked = logp.gather(-1, ids[0, 1:, None])[-len(out.token_ids) :, 0]
            worst = max(worst, (picked - torch.tensor(out.logprobs)).abs().max().item())
    return worst


def check_updates(engine, actor, send) -> None:
    """Two updates, each sent with ``send``: the engine follows each (not the base, nor the
    previous adapter)."""
    actor.eval()
    for seed in (0, 1):
        update(actor, seed)
        send(engine, actor)
        assert gap(engine, actor) < ATOL
        with actor.disable_adapter():
            base_gap = gap(engine, actor)
        assert base_gap > 1e-2  # the served model is the adapted one


def test_the_transformers_engine_serves_the_adapter(model_dir):
    engine = create_engine("transformers", model=model_dir, device="cpu")
    check_updates(engine, adapted_actor(model_dir), lambda e, a: e.load_weights(adapter_payload(a)))


def test_merged_weights_serve_the_adapted_model(model_dir):
    engine = create_engine("transformers", model=model_dir, device="cpu")
    check_updates(engine, adapted_actor(model_dir), lambda e, a: e.load_weights(merged_state(a)))


def test_vllm_serves_the_adapter(model_dir, tmp_path, monkeypatch):
    pytest.importorskip("vllm")
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path / "cache"))
    monkeypatch.setenv("VLLM_CONFIGURE_LOGGING", "0")
    engine = create_engine(
        "vllm", model=model_dir, dtype="float32", max_model_len=128, max_num_seqs=8,
        weights_dir=tmp_path / "weights", max_lora_rank=4,
    )
    try:
        check_updates(engine, adapted_actor(model_dir), lambda e, a: e.load_weights(adapter_payload(a)))
    finally:
        engine.close()
