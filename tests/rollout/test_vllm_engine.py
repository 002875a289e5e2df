"""The vLLM engine against plain transformers forward passes of the same tiny model.

One engine is started for the whole module (30-80 s on CPU). Tests that need it are skipped when
vLLM is not installed; the import-laziness and error-message tests always run.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys

import pytest
import torch

from agentfly.models.tiny import build_tiny_model
from agentfly.rollout.engines.base import ENGINES, SamplingParams
from agentfly.rollout.engines.vllm import VLLMEngine, VLLMUnavailableError, import_vllm

TEXTS = [
    "<|im_start|>user\nWhat is 12*34?<|im_end|>\n<|im_start|>assistant\n",
    "hello",
    "The quick brown fox jumps over the lazy dog. Use the calculator: 1234+5678",
]
STEPS = 12
# Max |engine logprob - transformers logprob| allowed; measured up to 2.5e-5 on CPU in fp32
# (64 tokens, temperatures 0, 0.7, 1, 1.3).
LOGPROB_ATOL = 1e-4


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """Tiny tied Qwen2 with head_dim 32 (vLLM's CPU attention needs >= 32) and varied outputs."""
    return build_tiny_model(
        tmp_path_factory.mktemp("vllm_model"),
        hidden_size=128,
        num_heads=4,
        head_dim=32,
        initializer_range=0.2,
    )


@pytest.fixture(scope="module")
def engine(model_dir, tmp_path_factory):
    pytest.importorskip("vllm")
    cache = tmp_path_factory.mktemp("vllm_cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VLLM_CACHE_ROOT", str(cache))
        mp.setenv("VLLM_CONFIGURE_LOGGING", "0")
        eng = VLLMEngine(
            model_dir,
            dtype="float32",
            max_model_len=256,
            seed=0,
            max_num_seqs=16,
            weights_dir=tmp_path_factory.mktemp("vllm_weights"),
        )
        yield eng
        eng.close()


@pytest.fixture(scope="module")
def reference(model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def prompts(model_dir) -> list[list[int]]:
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast.from_pretrained(model_dir)
    return [tokenizer.encode(t) for t in TEXTS]


def forward_logits(model, ids: list[int]) -> torch.Tensor:
    """(T, V) logits of one sequence, no cache."""
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float()


def greedy_reference(model, prompt: list[int], steps: int = STEPS) -> list[int]:
    """transformers greedy decoding (EOS ignored)."""
    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt]),
            attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
            do_sample=False,
            max_new_tokens=steps,
            min_new_tokens=steps,
            eos_token_id=None,
            pad_token_id=0,
        )
    return out[0, len(prompt) :].tolist()


def logprob_gap(model, prompt: list[int], out, temperature: float) -> float:
    """Max |engine logprob - log_softmax(logits / T)| over the sampled tokens."""
    logits = forward_logits(model, prompt + out.token_ids)  # (P + G, V)
    logp = torch.log_softmax(logits / temperature, dim=-1)  # (P + G, V)
    positions = torch.arange(len(prompt) - 1, len(prompt) - 1 + len(out.token_ids))  # (G,)
    expected = logp[positions, torch.tensor(out.token_ids)]  # (G,)
    return float((torch.tensor(out.logprobs) - expected).abs().max())


def greedy(engine, prompts) -> list[list[int]]:
    sampling = SamplingParams(temperature=0.0, max_tokens=STEPS, ignore_eos=True)
    return [outs[0].token_ids for outs in engine.generate(prompts, sampling)]


# -- no engine needed -------------------------------------------------------------------------


def test_registered_and_import_is_lazy():
    assert ENGINES.get("vllm") is VLLMEngine
    code = "import sys, agentfly.rollout.engines.vllm; assert 'vllm' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, env=dict(os.environ))


def test_missing_vllm_names_the_transformers_engine(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` raise ImportError
    with pytest.raises(VLLMUnavailableError, match=r"rollout\.name=transformers"):
        import_vllm()
    with pytest.raises(VLLMUnavailableError, match=r"rollout\.name=transformers"):
        VLLMEngine("/nonexistent")


# -- one engine for the rest ------------------------------------------------------------------


def test_greedy_matches_transformers(engine, reference, prompts):
    outputs = engine.generate(
        prompts, SamplingParams(n=2, temperature=0.0, max_tokens=STEPS, ignore_eos=True)
    )
    for prompt, per_prompt in zip(prompts, outputs):
        out, again = per_prompt  # vLLM refuses n > 1 for greedy; the engine repeats the sample
        assert again == out and again is not out
        assert out.token_ids == greedy_reference(reference, prompt)
        assert out.finish_reason == "length"
        assert logprob_gap(reference, prompt, out, 1.0) < LOGPROB_ATOL


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampled_logprobs_match_a_forward_pass(engine, reference, prompts, temperature):
    sampling = SamplingParams(
        n=3, temperature=temperature, max_tokens=STEPS, ignore_eos=True, seed=1
    )
    outputs = engine.generate(prompts, sampling)
    assert [len(per_prompt) for per_prompt in outputs] == [3] * len(prompts)
    gaps = [
        logprob_gap(reference, prompt, out, temperature)
        for prompt, per_prompt in zip(prompts, outputs)
        for out in per_prompt
    ]
    assert all(len(o.token_ids) == len(o.logprobs) == STEPS for p in outputs for o in p)
    assert max(gaps) < LOGPROB_ATOL, gaps
    samples = {tuple(o.token_ids) for p in outputs for o in p}
    assert len(samples) > len(prompts)  # the n samples differ
    if not engine._on_cpu:  # the CPU backend ignores per-request seeds (see the engine)
        assert outputs == engine.generate(prompts, sampling)  # a seed reproduces them


def test_mixed_batch_greedy_rows_use_raw_logits(engine, reference, prompts):
    params = [
        SamplingParams(temperature=0.0, max_tokens=STEPS, ignore_eos=True),
        SamplingParams(temperature=0.5, max_tokens=STEPS, ignore_eos=True, seed=3),
        SamplingParams(temperature=0.0, max_tokens=STEPS, ignore_eos=True),
    ]
    outputs = engine.generate(prompts, params)
    for prompt, sp, (out,) in zip(prompts, params, outputs):
        assert logprob_gap(reference, prompt, out, sp.temperature or 1.0) < LOGPROB_ATOL
        if sp.greedy:
            assert out.token_ids == greedy_reference(reference, prompt)


def test_stop_token_ids_and_stop_strings(engine, reference, prompts):
    prompt = prompts[2]
    full = greedy_reference(reference, prompt)
    k = next(i for i in range(2, STEPS) if full[i] not in full[:i])
    (out,) = engine.generate(
        [prompt],
        SamplingParams(temperature=0.0, max_tokens=STEPS, stop_token_ids=[full[k]]),
    )[0]
    assert out.token_ids == full[: k + 1]  # the stop token is kept
    assert out.finish_reason == "stop"

    decode = engine.tokenizer.decode
    k = next(
        i
        for i in range(2, STEPS)
        if (s := decode([full[i]])).strip() and s.isascii() and s not in decode(full[:i])
    )
    (out,) = engine.generate(
        [prompt],
        SamplingParams(temperature=0.0, max_tokens=STEPS, stop=[decode([full[k]])]),
    )[0]
    assert out.token_ids == full[: k + 1]  # ... and so is the token completing a stop string
    assert out.finish_reason == "stop"


def test_max_model_len_bounds_prompt_and_generation(engine, prompts):
    with pytest.raises(ValueError, match="max_model_len"):
        engine.generate([[1] * engine.max_model_len], SamplingParams(max_tokens=1))
    prompt = prompts[0] + [5] * (engine.max_model_len - len(prompts[0]) - 3)
    (out,) = engine.generate(
        [prompt], SamplingParams(temperature=0.0, max_tokens=50, ignore_eos=True)
    )[0]
    assert len(out.token_ids) == 3 and out.finish_reason == "length"


def test_sleep_and_wake_up_keep_serving(engine, prompts):
    before = greedy(engine, prompts)
    engine.sleep()  # a logged no-op on CPU
    engine.wake_up()
    assert greedy(engine, prompts) == before


def test_load_weights_follows_the_perturbed_model(engine, reference, prompts, model_dir, tmp_path):
    original = greedy(engine, prompts)
    assert original == [greedy_reference(reference, p) for p in prompts]

    # Only the (tied) embedding changes: a head left on the old embedding would show here.
    embed_only = copy.deepcopy(reference)
    with torch.no_grad():
        embedding = embed_only.get_input_embeddings().weight
        embedding.add_(
            0.5 * torch.randn(embedding.shape, generator=torch.Generator().manual_seed(0))
        )
    assert embed_only.lm_head.weight.data_ptr() == embedding.data_ptr()
    engine.load_weights({"model.embed_tokens.weight": embedding})
    expected = [greedy_reference(embed_only, p) for p in prompts]
    assert expected != original
    assert greedy(engine, prompts) == expected

    # Every weight changes, handed over as a full state dict (lm_head.weight included).
    perturbed = copy.deepcopy(reference)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for param in perturbed.parameters():
            param.add_(0.3 * param.std() * torch.randn(param.shape, generator=gen))
    engine.load_weights(perturbed.state_dict())
    expected = [greedy_reference(perturbed, p) for p in prompts]
    assert expected != original
    assert greedy(engine, prompts) == expected
    sampling = SamplingParams(n=2, temperature=0.8, max_tokens=STEPS, ignore_eos=True, seed=5)
    gaps = [
        logprob_gap(perturbed, prompt, out, 0.8)
        for prompt, per_prompt in zip(prompts, engine.generate(prompts, sampling))
        for out in per_prompt
    ]
    assert max(gaps) < LOGPROB_ATOL, gaps

    # A checkpoint directory brings the original back.
    engine.load_weights(model_dir)
    assert greedy(engine, prompts) == original
