"""The CUDA path (skipped without a GPU): training, the transformers engine, agentfly_sdpa.

CPU tests cover each of these pieces; here they run on the device, against the same independent
references (a plain forward pass, transformers' eager attention), so a device mismatch or a
CUDA-only branch shows.
"""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from agentfly.cli import main
from agentfly.models.tiny import build_tiny_model

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def gqa_model_dir(tmp_path_factory):
    # 4 query heads on 2 K/V heads, larger random weights so sampled tokens vary
    return build_tiny_model(
        tmp_path_factory.mktemp("gqa"), num_heads=4, num_kv_heads=2, initializer_range=0.2
    )


def test_fit_on_cuda_computes_rewards_and_changes_weights(tmp_path):
    from tests.fit_runs import fit_args, rows, write_task

    root, model = write_task(tmp_path / "task", [(1, 2), (3, 4), (5, 6), (7, 8)])
    run = tmp_path / "run"
    assert main(fit_args(root, model, run, 2, ["trainer.device=cuda"])) == 0
    metrics = [r for r in rows(run) if r.get("training/iteration")]
    assert [float(r["training/iteration"]) for r in metrics] == [1.0, 2.0]
    assert all(r["rollout/reward/mean"] != "" for r in metrics)
    before = load_file(model / "model.safetensors")
    after = load_file(run / "hf_actor" / "model.safetensors")
    assert any(not torch.equal(before[k], after[k].cpu()) for k in before)


def test_hf_engine_on_cuda_logprobs_equal_a_forward_pass(gqa_model_dir):
    """Rows leaving at 3, 7 and 12 tokens shrink the batch and its growing KV cache twice; every
    sampled token's log-prob still equals a plain forward pass of the same model on the GPU."""
    from agentfly.rollout.engines import SamplingParams
    from agentfly.rollout.engines.transformers_engine import TransformersEngine

    engine = TransformersEngine(gqa_model_dir, seed=0, device="cuda")
    assert engine.model.device.type == "cuda"
    reference = AutoModelForCausalLM.from_pretrained(gqa_model_dir, dtype=torch.float32).cuda().eval()
    texts = ["hello", "What is 12*34? Use the calculator", "The quick brown fox jumps over"]
    prompts = [engine.tokenizer.encode(t) for t in texts]
    sampling = [
        SamplingParams(n=2, temperature=1.0, max_tokens=m, ignore_eos=True, seed=s)
        for s, m in enumerate((3, 12, 7))
    ]
    outputs = engine.generate(prompts, sampling)
    for prompt, per_prompt, sp in zip(prompts, outputs, sampling, strict=True):
        for out in per_prompt:
            assert len(out.token_ids) == sp.max_tokens
            ids = torch.tensor([prompt + out.token_ids], device="cuda")
            with torch.no_grad():
                logp = torch.log_softmax(reference(ids).logits[0].float(), dim=-1)
            positions = torch.arange(len(prompt) - 1, len(prompt) - 1 + len(out.token_ids))
            expected = logp[positions, torch.tensor(out.token_ids)].cpu()
            assert torch.allclose(torch.tensor(out.logprobs), expected, atol=1e-3)


def test_grouped_sdpa_on_cuda_equals_eager_attention(gqa_model_dir):
    from agentfly.models.attention import NAME, use_grouped_sdpa

    ids = torch.randint(5, 300, (3, 12), generator=torch.Generator().manual_seed(3))
    mask = torch.ones(3, 12, dtype=torch.long)
    mask[0, :5] = 0  # left padding of different widths
    mask[1, :2] = 0
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
    batch = {"input_ids": ids.cuda(), "attention_mask": mask.cuda(), "position_ids": position_ids.cuda()}
    out = {}
    for attn in ("eager", "sdpa"):
        model = AutoModelForCausalLM.from_pretrained(gqa_model_dir, attn_implementation=attn).cuda()
        if attn == "sdpa":
            model = use_grouped_sdpa(model)
            assert model.config._attn_implementation == NAME
        with torch.no_grad():
            out[attn] = model(**batch).logits * batch["attention_mask"][..., None]
    torch.testing.assert_close(out["sdpa"], out["eager"], atol=1e-4, rtol=1e-4)


def test_generation_keeps_cudnn_attention_off_and_restores_it(gqa_model_dir):
    """cuDNN attention compiles a graph per key length (every decode step): the engine turns it
    off while it generates and leaves the process's setting as it found it."""
    from agentfly.rollout.engines import SamplingParams, transformers_engine

    engine = transformers_engine.TransformersEngine(gqa_model_dir, seed=0, device="cuda", dtype="bfloat16")
    seen = []
    real = engine._generate_rows
    engine._generate_rows = lambda rows: seen.append(torch.backends.cuda.cudnn_sdp_enabled()) or real(rows)
    before = torch.backends.cuda.cudnn_sdp_enabled()
    engine.generate([[5, 6, 7]], SamplingParams(max_tokens=4, ignore_eos=True))
    assert seen == [False]
    assert torch.backends.cuda.cudnn_sdp_enabled() == before


def test_sft_on_cuda_trains_and_exports(tmp_path):
    """`agentfly sft` (its default task: the demo model on calculator conversations) on the GPU."""
    run = tmp_path / "sft"
    args = ["sft", "trainer.device=cuda", "trainer.total_training_steps=2", "trainer.test_freq=-1",
            f"trainer.default_local_dir={run}"]
    assert main(args) == 0
    assert (run / "hf_actor" / "model.safetensors").exists()


def test_lora_fit_on_cuda_keeps_the_engine_on_the_adapted_actor(tmp_path):
    """LoRA on the GPU: the in-process engine (fp32 here) receives the adapter after each update,
    so the engine-vs-trainer gap on the sampled tokens stays at float noise."""
    from tests.fit_runs import fit_args, rows, write_task

    root, model = write_task(tmp_path / "task", [(1, 2), (3, 4), (5, 6), (7, 8)])
    run = tmp_path / "run"
    extra = ["trainer.device=cuda", "actor_rollout_ref.model.lora.rank=8",
             "actor_rollout_ref.rollout.dtype=float32", "actor_rollout_ref.actor.optim.lr=1e-2"]
    assert main(fit_args(root, model, run, 3, extra)) == 0
    metrics = [r for r in rows(run) if r.get("training/iteration")]
    assert len(metrics) == 3
    assert all(float(r["rollout/logprob_gap/abs_mean"]) < 1e-3 for r in metrics), metrics
