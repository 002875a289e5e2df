"""The transformers engine's static path (static K/V slots, continuous batching) against its
dynamic path and a plain forward pass, on the CPU (the same path as on CUDA, minus the graph)."""

from __future__ import annotations

import pytest
import torch

from agentfly.models.tiny import build_tiny_model
from agentfly.rollout.engines import SamplingParams, static_decode
from agentfly.rollout.engines.static_decode import StaticDecoder
from agentfly.rollout.engines.transformers_engine import TransformersEngine

TEXTS = [
    "<|im_start|>user\nWhat is 12*34?<|im_end|>\n<|im_start|>assistant\n",
    "hello",
    "The quick brown fox jumps over the lazy dog. Use the calculator: 1234+5678",
    "a b c",
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """Grouped-query attention (4 query heads on 2 K/V heads), weights large enough that greedy
    outputs vary."""
    return build_tiny_model(
        tmp_path_factory.mktemp("static"), num_heads=4, num_kv_heads=2, initializer_range=0.2
    )


@pytest.fixture(scope="module")
def dynamic(model_dir) -> TransformersEngine:
    engine = TransformersEngine(model_dir, device="cpu")
    assert not engine.static  # None on the CPU: the dynamic path
    return engine


@pytest.fixture(scope="module")
def reference(model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def prompts(dynamic) -> list[list[int]]:
    encoded = [dynamic.tokenizer.encode(t) for t in TEXTS]
    assert len({len(p) for p in encoded}) == len(TEXTS)  # slots of different lengths
    return encoded


def static_engine(model_dir, **kwargs) -> TransformersEngine:
    engine = TransformersEngine(model_dir, device="cpu", enforce_eager=False, **kwargs)
    assert engine.static
    return engine


def count_steps(monkeypatch) -> list[int]:
    """Patch :meth:`StaticDecoder.step` to count its calls (one element per step)."""
    steps: list[int] = []
    real = StaticDecoder.step
    monkeypatch.setattr(StaticDecoder, "step", lambda self, *a: steps.append(1) or real(self, *a))
    return steps


def ids(outputs) -> list[list[list[int]]]:
    return [[o.token_ids for o in per] for per in outputs]


def assert_same(static_out, dynamic_out) -> None:
    assert ids(static_out) == ids(dynamic_out)
    for per_s, per_d in zip(static_out, dynamic_out, strict=True):
        for s, d in zip(per_s, per_d, strict=True):
            assert s.finish_reason == d.finish_reason
            assert torch.allclose(torch.tensor(s.logprobs), torch.tensor(d.logprobs), atol=1e-4)


def forward_logprobs(
    model, prompt: list[int], tokens: list[int], temperature: float
) -> torch.Tensor:
    """(G,) log_softmax(logits / T) of a plain forward pass at each sampled token."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + tokens])).logits[0].float()  # (P + G, V)
    logp = torch.log_softmax(logits / temperature, dim=-1)
    positions = torch.arange(len(prompt) - 1, len(prompt) - 1 + len(tokens))
    return logp[positions, torch.tensor(tokens)]


def test_buckets():
    assert [static_decode.row_bucket(n, 256) for n in (1, 2, 3, 32, 33, 256, 300)] == [
        1,
        2,
        4,
        32,
        64,
        256,
        256,
    ]
    assert static_decode.row_bucket(40, 48) == 48  # capped by max_num_seqs
    assert [static_decode.length_bucket(n, 4096) for n in (1, 64, 65, 1000)] == [64, 64, 128, 1024]
    assert static_decode.length_bucket(90, 100) == 100  # capped by max_model_len


def test_greedy_static_equals_dynamic_with_more_rows_than_slots(
    model_dir, dynamic, prompts, monkeypatch
):
    """Six rows through two slots: every row comes back once, in request order, with the dynamic
    path's tokens, log-probs and finish reasons; finished slots are refilled mid-way."""
    engine = static_engine(model_dir, max_num_seqs=2)
    sampling = [
        SamplingParams(temperature=0, max_tokens=m, ignore_eos=True, n=n)
        for m, n in ((3, 1), (12, 2), (7, 1), (5, 2))
    ]
    steps = count_steps(monkeypatch)
    out = engine.generate(prompts, sampling)
    assert [[len(o.token_ids) for o in per] for per in out] == [[3], [12, 12], [7], [5, 5]]
    assert_same(out, dynamic.generate(prompts, sampling))
    # rows of 3, 12, 12, 7, 5, 5 tokens: a freed slot takes the next row, so one slot decodes
    # rows 0, 2, 4 (3 + 12 + 5 tokens) and the other rows 1, 3, 5 (12 + 7 + 5 = 24 tokens, each
    # sampled after a step but the first, from the prefill): 23 steps; chunks take 11 + 11 + 4
    assert len(steps) == 23


def test_a_row_stopping_early_is_refilled(model_dir, dynamic, prompts, monkeypatch):
    """Two slots, three rows: the first stops at a stop token within 2 tokens, and the waiting
    third row takes its slot at once, so the call takes the 10-token row's 9 decode steps
    (chunks would take 9 + 7)."""
    free = dynamic.generate(prompts[:1], SamplingParams(temperature=0, max_tokens=20))[0][0]
    stop = free.token_ids[1]
    sampling = [
        SamplingParams(temperature=0, max_tokens=20, stop_token_ids=[stop]),
        SamplingParams(temperature=0, max_tokens=10, ignore_eos=True),
        SamplingParams(temperature=0, max_tokens=8, ignore_eos=True),
    ]
    engine = static_engine(model_dir, max_num_seqs=2)
    steps = count_steps(monkeypatch)
    out = engine.generate(prompts[:3], sampling)
    assert out[0][0].finish_reason == "stop" and len(out[0][0].token_ids) <= 2
    assert [len(per[0].token_ids) for per in out[1:]] == [10, 8]
    assert len(steps) == 9
    assert_same(out, dynamic.generate(prompts[:3], sampling))


@pytest.mark.parametrize(
    "sampling",
    [
        SamplingParams(n=3, temperature=0.7, top_p=0.9, top_k=50, max_tokens=12, ignore_eos=True),
        SamplingParams(n=2, temperature=1.3, max_tokens=9, ignore_eos=True, seed=5),
    ],
    ids=["t0.7-topp-topk", "t1.3-seeded"],
)
def test_sampled_logprobs_equal_a_plain_forward_pass(model_dir, reference, prompts, sampling):
    engine = static_engine(model_dir, max_num_seqs=4)  # 8 or 12 rows through 4 slots
    for prompt, per_prompt in zip(prompts, engine.generate(prompts, sampling), strict=True):
        assert len(per_prompt) == sampling.n
        for out in per_prompt:
            assert len(out.token_ids) == sampling.max_tokens
            expected = forward_logprobs(reference, prompt, out.token_ids, sampling.temperature)
            assert torch.allclose(torch.tensor(out.logprobs), expected, atol=1e-4)


def test_seeds_reproduce_and_match_the_dynamic_path(model_dir, dynamic, prompts):
    """Seeded rows reproduce through refilled slots; when every row has a slot, each generator
    draws in the dynamic path's order, so the samples are the dynamic path's."""
    sampling = [
        SamplingParams(n=2, temperature=1.0, max_tokens=8, ignore_eos=True, seed=s)
        for s in range(4)
    ]
    refilled = static_engine(model_dir, max_num_seqs=3)
    first = refilled.generate(prompts, sampling)
    assert ids(first) == ids(refilled.generate(prompts, sampling))
    assert len({tuple(o.token_ids) for o in first[1]}) == 2  # the n samples differ
    roomy = static_engine(model_dir, max_num_seqs=8)
    assert_same(roomy.generate(prompts, sampling), dynamic.generate(prompts, sampling))


def test_prefix_cache_reuse(model_dir, prompts):
    """A chain's next turn prefills only its new tokens from the static path's finished rows,
    and samples what an engine without a prefix cache samples."""
    engine = static_engine(model_dir, max_num_seqs=2)
    uncached = TransformersEngine(model_dir, device="cpu", enable_prefix_caching=False)
    greedy = SamplingParams(temperature=0, max_tokens=20, ignore_eos=True)
    first = engine.generate(prompts[:2], greedy)
    turns = [p + per[0].token_ids + prompts[3] for p, per in zip(prompts, first, strict=False)]
    before = engine.prefill_stats.reused_tokens
    second = engine.generate(turns, greedy)
    assert engine.prefill_stats.reused_tokens - before >= 16 * 2  # at least a block each
    assert_same(second, uncached.generate(turns, greedy))


def test_eager_attention_takes_an_additive_mask(model_dir, prompts):
    """Eager attention adds its mask: the step builds a float one, and the outputs are the
    dynamic path's with the same attention."""
    dyn = TransformersEngine(model_dir, device="cpu", attn_implementation="eager")
    engine = static_engine(model_dir, attn_implementation="eager", max_num_seqs=2)
    greedy = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    assert_same(engine.generate(prompts, greedy), dyn.generate(prompts, greedy))


def test_load_weights_and_sleep(tmp_path, model_dir, reference, prompts):
    """New weights reach the decode step (copied into the parameters it reads); sleep drops the
    slots and the next call builds them again."""
    from transformers import AutoModelForCausalLM

    other_dir = build_tiny_model(
        tmp_path / "other", num_heads=4, num_kv_heads=2, initializer_range=0.2, seed=1
    )
    other = AutoModelForCausalLM.from_pretrained(other_dir, dtype=torch.float32).eval()
    greedy = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    engine = static_engine(model_dir, max_num_seqs=2)
    dyn_other = TransformersEngine(other_dir, device="cpu")
    before = engine.generate(prompts, greedy)
    decoder = engine._decoder
    engine.load_weights(other.state_dict())
    after = engine.generate(prompts, greedy)
    assert engine._decoder is decoder  # the same slots, reading the new weights
    assert ids(after) != ids(before)
    assert_same(after, dyn_other.generate(prompts, greedy))
    engine.sleep()
    assert engine._decoder is None
    engine.wake_up()
    assert_same(engine.generate(prompts, greedy), after)


def test_lora_adapter(model_dir, prompts):
    """A LoRA adapter is served on the static path as on the dynamic one."""
    from transformers import AutoModelForCausalLM

    from agentfly.core.weights import adapter_payload
    from agentfly.modules.lora import apply_lora
    from agentfly.modules.settings import LoraSettings

    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    actor = apply_lora(base, LoraSettings(rank=4, alpha=8.0, target_modules="all-linear"))
    with torch.no_grad():
        for name, param in actor.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5, generator=torch.Generator().manual_seed(0))
    payload = adapter_payload(actor)
    greedy = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    engine = static_engine(model_dir, max_num_seqs=2)
    dyn = TransformersEngine(model_dir, device="cpu")
    plain = engine.generate(prompts, greedy)
    engine.load_weights(payload)
    dyn.load_weights(payload)
    adapted = engine.generate(prompts, greedy)
    assert ids(adapted) != ids(plain)
    assert_same(adapted, dyn.generate(prompts, greedy))


def test_enforce_eager_selects_the_path(model_dir):
    from agentfly.rollout.engines.transformers_engine import decodes_static

    # unset, no device decodes from static slots (never run on a GPU: not the default there)
    assert not decodes_static(None) and not decodes_static(True) and decodes_static(False)
    assert not TransformersEngine(model_dir, device="cpu").static
    assert not TransformersEngine(model_dir, device="cpu", enforce_eager=True).static
    static = TransformersEngine(model_dir, device="cpu", enforce_eager=False)
    assert static.static
    assert static.generate([], SamplingParams()) == []
    # the slots go with the prefix cache (freed before an update on the same device)
    static.generate([[5, 6, 7]], SamplingParams(temperature=0, max_tokens=4, ignore_eos=True))
    slots = static._decoder.nbytes()
    assert slots > 0 and static.free_prefix_cache() >= slots and static._decoder is None


@pytest.mark.gpu
def test_cuda_graph_decoding_equals_eager(model_dir, prompts):
    """On CUDA: the captured step gives the eager dynamic path's greedy tokens and log-probs,
    follows new weights (copied in place, the graph kept) and is rebuilt after sleep."""
    from transformers import AutoModelForCausalLM

    graphs = TransformersEngine(model_dir, device="cuda", max_num_seqs=2, enforce_eager=False)
    eager = TransformersEngine(model_dir, device="cuda", enforce_eager=True)
    assert graphs.static and not eager.static
    greedy = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    sampled = SamplingParams(n=3, temperature=1.0, max_tokens=10, ignore_eos=True, seed=1)
    for sampling in (greedy, sampled):
        out = graphs.generate(prompts, sampling)
        assert graphs._decoder.graph is not None
        if sampling is greedy:
            assert_same(out, eager.generate(prompts, sampling))
        assert ids(out) == ids(graphs.generate(prompts, sampling))
    decoder = graphs._decoder
    reference = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    with torch.no_grad():
        for param in reference.parameters():
            param.mul_(1.5)
    graphs.load_weights(reference.state_dict())
    eager.load_weights(reference.state_dict())
    assert_same(graphs.generate(prompts, greedy), eager.generate(prompts, greedy))
    assert graphs._decoder is decoder
    graphs.sleep()
    graphs.wake_up()
    assert_same(graphs.generate(prompts, greedy), eager.generate(prompts, greedy))


def test_the_config_key_reaches_the_engine(model_dir):
    """``actor_rollout_ref.rollout.enforce_eager`` is the transformers engine's setting too (unset:
    the engine decides by its device)."""
    from agentfly.cli import load_config
    from agentfly.run.plan import plan_rollout
    from agentfly.run.topology import Hardware, resolve_topology

    def engine_kwargs(*overrides: str) -> dict:
        base = [
            f"agent.init_config.model_name_or_path={model_dir}",
            "algorithm.adv_estimator=grpo",
            "agent.init_config.reward_name=math_equal_reward",
            "trainer.device=cpu",
        ]
        cfg = load_config([*base, *overrides])
        return plan_rollout(cfg, resolve_topology(cfg, Hardware(gpus=0, cpus=2))).engine_kwargs

    assert "enforce_eager" not in engine_kwargs()
    kwargs = engine_kwargs("actor_rollout_ref.rollout.enforce_eager=false")
    assert kwargs["enforce_eager"] is False
    kwargs.pop("model")
    assert TransformersEngine(model_dir, **kwargs).static
