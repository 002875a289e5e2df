"""The transformers engine against a plain forward pass of the same model."""

from __future__ import annotations

import pytest
import torch

from agentfly.models.tiny import build_tiny_model
from agentfly.rollout.engines import ENGINES, SamplingParams, create_engine
from agentfly.rollout.engines.sampling import draw_uniforms, sample_tokens
from agentfly.rollout.engines.transformers_engine import TransformersEngine

TEXTS = [
    "<|im_start|>user\nWhat is 12*34?<|im_end|>\n<|im_start|>assistant\n",
    "hello",
    "The quick brown fox jumps over the lazy dog. Use the calculator: 1234+5678",
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A tiny model with larger random weights, so greedy outputs vary (0.02 mostly repeats)."""
    return build_tiny_model(tmp_path_factory.mktemp("varied"), initializer_range=0.2)


@pytest.fixture(scope="module")
def engine(model_dir) -> TransformersEngine:
    return TransformersEngine(model_dir, seed=0, device="cpu")


@pytest.fixture(scope="module")
def reference(model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def prompts(engine) -> list[list[int]]:
    encoded = [engine.tokenizer.encode(t) for t in TEXTS]
    assert len({len(p) for p in encoded}) == 3  # different lengths: rows are left-padded
    return encoded


def forward_logits(model, ids: list[int]) -> torch.Tensor:
    """(T, V) logits of one unpadded sequence, no cache."""
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float()


def greedy_reference(model, prompt: list[int], steps: int) -> list[int]:
    ids = list(prompt)
    for _ in range(steps):
        ids.append(int(forward_logits(model, ids)[-1].argmax()))
    return ids[len(prompt) :]


@pytest.mark.parametrize(
    "sampling",
    [
        SamplingParams(n=3, temperature=0.7, top_p=0.9, top_k=50, max_tokens=12, ignore_eos=True),
        SamplingParams(n=2, temperature=1.0, max_tokens=12, ignore_eos=True),
        SamplingParams(n=1, temperature=0.0, max_tokens=12, ignore_eos=True),
    ],
    ids=["t0.7-topp-topk", "t1", "greedy"],
)
def test_logprobs_equal_a_plain_forward_pass(engine, reference, prompts, sampling):
    outputs = engine.generate(prompts, sampling)
    assert [len(per_prompt) for per_prompt in outputs] == [sampling.n] * len(prompts)
    temperature = sampling.temperature or 1.0
    for prompt, per_prompt in zip(prompts, outputs, strict=True):
        for out in per_prompt:
            assert len(out.token_ids) == len(out.logprobs) == 12
            assert out.finish_reason == "length"
            logits = forward_logits(reference, prompt + out.token_ids)  # (P + G, V)
            logp = torch.log_softmax(logits / temperature, dim=-1)
            positions = torch.arange(len(prompt) - 1, len(prompt) - 1 + len(out.token_ids))
            expected = logp[positions, torch.tensor(out.token_ids)]  # (G,)
            assert torch.allclose(torch.tensor(out.logprobs), expected, atol=1e-4)
            if sampling.greedy:
                assert out.token_ids == logits[positions].argmax(-1).tolist()


def test_samples_differ_and_a_seed_reproduces_them(engine, prompts):
    sampling = SamplingParams(n=4, temperature=1.0, max_tokens=8, seed=7)
    first, second = engine.generate(prompts, sampling), engine.generate(prompts, sampling)
    ids = [[o.token_ids for o in per] for per in first]
    assert ids == [[o.token_ids for o in per] for per in second]
    assert len({tuple(s) for s in ids[0]}) > 1  # n samples of one prompt are not copies


def test_engine_seed_makes_unseeded_runs_reproducible(model_dir, engine, prompts):
    sampling = SamplingParams(n=2, max_tokens=6)
    again = TransformersEngine(model_dir, seed=0, device="cpu")
    fresh = TransformersEngine(model_dir, seed=0, device="cpu")
    assert [[o.token_ids for o in p] for p in again.generate(prompts, sampling)] == [
        [o.token_ids for o in p] for p in fresh.generate(prompts, sampling)
    ]


def test_stop_string_keeps_the_completing_token(engine, prompts):
    free = engine.generate(prompts[:1], SamplingParams(temperature=0, max_tokens=20))[0][0]
    tokenizer = engine.tokenizer
    # A stop string that ends inside the 6th generated token's text.
    prefix_text = tokenizer.decode(free.token_ids[:5], skip_special_tokens=False)
    sixth = tokenizer.decode(free.token_ids[5:6], skip_special_tokens=False)
    stop = (prefix_text + sixth[:1])[-3:]
    first_hit = next(
        k
        for k in range(1, len(free.token_ids) + 1)
        if stop in tokenizer.decode(free.token_ids[:k], skip_special_tokens=False)
    )
    out = engine.generate(prompts[:1], SamplingParams(temperature=0, max_tokens=20, stop=[stop]))
    out = out[0][0]
    assert out.finish_reason == "stop"
    assert out.token_ids == free.token_ids[:first_hit]
    text = tokenizer.decode(out.token_ids, skip_special_tokens=False)
    assert stop in text and stop not in tokenizer.decode(out.token_ids[:-1])


def test_stop_token_ids_and_eos(engine, prompts):
    free = engine.generate(prompts[:1], SamplingParams(temperature=0, max_tokens=10))[0][0]
    target = free.token_ids[3]
    first = free.token_ids.index(target)
    sampling = SamplingParams(temperature=0, max_tokens=10, stop_token_ids=[target])
    out = engine.generate(prompts[:1], sampling)[0][0]
    assert (out.token_ids, out.finish_reason) == (free.token_ids[: first + 1], "stop")
    assert engine.eos_token_ids == {engine.tokenizer.convert_tokens_to_ids("<|im_end|>")}


def test_max_tokens_and_max_model_len(model_dir, prompts):
    short = TransformersEngine(model_dir, max_model_len=len(prompts[0]) + 3, device="cpu")
    out = short.generate(prompts[:1], SamplingParams(max_tokens=50, ignore_eos=True))[0][0]
    assert (len(out.token_ids), out.finish_reason) == (3, "length")
    with pytest.raises(ValueError, match="max_model_len"):
        short.generate([prompts[2]], SamplingParams())


def test_load_weights_changes_outputs(tmp_path, model_dir, reference, prompts):
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    other_dir = build_tiny_model(tmp_path / "other", initializer_range=0.2, seed=1)
    other = AutoModelForCausalLM.from_pretrained(other_dir, dtype=torch.float32).eval()
    greedy = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    engine = TransformersEngine(model_dir, device="cpu")
    before = [p[0].token_ids for p in engine.generate(prompts, greedy)]
    assert before == [greedy_reference(reference, p, 8) for p in prompts]
    expected = [greedy_reference(other, p, 8) for p in prompts]
    assert expected != before

    single_file = tmp_path / "weights.safetensors"
    tied = "lm_head.weight"  # shares memory with the embedding; safetensors files omit it
    save_file({k: v.clone() for k, v in other.state_dict().items() if k != tied}, single_file)
    for weights in (other.state_dict(), other_dir, single_file):
        engine.load_weights(reference.state_dict())  # back to the start
        engine.load_weights(weights)
        assert [p[0].token_ids for p in engine.generate(prompts, greedy)] == expected

    with pytest.raises(KeyError, match="not parameters"):
        engine.load_weights({"not.a.weight": torch.zeros(1)})


def test_registry_and_no_op_sleep(model_dir):
    assert ENGINES.get("hf") is TransformersEngine and ENGINES.get("transformers") is TransformersEngine
    engine = create_engine("hf", model=model_dir, max_model_len=64, device="cpu")
    assert engine.max_model_len == 64
    engine.sleep()
    engine.wake_up()


def test_per_prompt_sampling_and_batch_independent_seeds(engine, prompts):
    """Each prompt may bring its own parameters; a seeded prompt samples the same whatever
    shares its batch."""
    seeded = SamplingParams(n=2, temperature=1.0, max_tokens=5, seed=3, ignore_eos=True)
    alone = engine.generate(prompts[1:2], seeded)[0]
    greedy = SamplingParams(temperature=0, max_tokens=3, ignore_eos=True)
    other = SamplingParams(n=3, temperature=0.5, top_k=5, max_tokens=7, ignore_eos=True)
    mixed = engine.generate(prompts, [greedy, seeded, other])
    assert [[len(o.token_ids) for o in per] for per in mixed] == [[3], [5, 5], [7, 7, 7]]
    assert [o.token_ids for o in mixed[1]] == [o.token_ids for o in alone]
    assert mixed[1][0].token_ids != mixed[1][1].token_ids  # one generator per prompt, not per row
    assert mixed[0][0].token_ids == engine.generate(prompts[:1], greedy)[0][0].token_ids


def _draw(logits, sampling: SamplingParams, seed: int = 0):
    batch = logits.shape[0]
    return sample_tokens(
        logits,
        torch.full((batch,), sampling.temperature),
        torch.full((batch,), sampling.top_p),
        torch.full((batch,), sampling.top_k),
        None if sampling.greedy else draw_uniforms([(range(batch), torch.Generator().manual_seed(seed))], "cpu"),
    )


def test_top_k_and_top_p_restrict_what_is_drawn():
    logits = torch.tensor([[3.0, 2.0, 1.0, 0.0, -1.0]]).repeat(300, 1)  # (B, V)
    chosen, logp = _draw(logits, SamplingParams(top_k=2))
    assert set(chosen.tolist()) == {0, 1}
    # the log-probability ignores the truncation
    assert torch.allclose(logp, torch.log_softmax(logits, -1).gather(-1, chosen[:, None])[:, 0])
    probs = torch.softmax(logits[0], -1)  # 0.64, 0.24, 0.09, ...
    chosen, _ = _draw(logits, SamplingParams(top_p=float(probs[0]) + 0.01))
    assert set(chosen.tolist()) == {0, 1}
    chosen, _ = _draw(logits, SamplingParams(top_p=0.5))
    assert set(chosen.tolist()) == {0}
    # top-p is taken on the top-k renormalised distribution: 0.64 / (0.64 + 0.24) = 0.73 > 0.7
    chosen, _ = _draw(logits, SamplingParams(top_k=2, top_p=0.7))
    assert set(chosen.tolist()) == {0}
    chosen, logp = _draw(logits, SamplingParams(temperature=0.0))
    assert set(chosen.tolist()) == {0}
    assert torch.allclose(logp, torch.log_softmax(logits, -1)[:, 0])
    chosen, logp = _draw(logits, SamplingParams(temperature=2.0))
    assert torch.allclose(logp, torch.log_softmax(logits / 2, -1).gather(-1, chosen[:, None])[:, 0])


def test_rows_leaving_at_different_steps_keep_exact_logprobs(tmp_path_factory, prompts):
    """Rows finish at 3, 7 and 12 tokens, so the batch and its KV cache shrink twice mid-way
    (the cache's buffers are re-selected, then written in place); on a grouped-query model
    (4 query heads on 2 K/V heads) every log-prob still equals a plain forward pass."""
    from transformers import AutoModelForCausalLM

    from agentfly.rollout.engines import kv_cache

    path = build_tiny_model(
        tmp_path_factory.mktemp("gqa"), num_heads=4, num_kv_heads=2, initializer_range=0.2
    )
    engine = TransformersEngine(path, seed=0, device="cpu")
    reference = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    caches = []
    real = kv_cache.growing_cache
    kv_cache.growing_cache = lambda *a, **k: caches.append(real(*a, **k)) or caches[-1]
    try:
        sampling = [
            SamplingParams(n=2, temperature=1.0, max_tokens=m, ignore_eos=True, seed=s)
            for s, m in enumerate((3, 12, 7))
        ]
        outputs = engine.generate(prompts, sampling)
    finally:
        kv_cache.growing_cache = real
    assert all(type(layer).__name__ == "GrowingLayer" for layer in caches[0].layers)
    for prompt, per_prompt, sp in zip(prompts, outputs, sampling, strict=True):
        for out in per_prompt:
            assert len(out.token_ids) == sp.max_tokens
            logits = forward_logits(reference, prompt + out.token_ids)
            logp = torch.log_softmax(logits, dim=-1)
            positions = torch.arange(len(prompt) - 1, len(prompt) - 1 + len(out.token_ids))
            expected = logp[positions, torch.tensor(out.token_ids)]
            assert torch.allclose(torch.tensor(out.logprobs), expected, atol=1e-4)
