"""The transformers engine's prefix cache: multi-turn calls give what an engine without it gives,
while prefilling only what is new; the store forgets old weights and stays within its budget."""

from __future__ import annotations

import itertools

import pytest
import torch

from agentfly.models.tiny import build_tiny_model
from agentfly.rollout.engines import SamplingParams
from agentfly.rollout.engines.prefix_cache import PrefixCache
from agentfly.rollout.engines.transformers_engine import TransformersEngine

BLOCK = 16  # the store's block size: a prompt reuses whole blocks only
SYSTEM = "<|im_start|>system\nYou are a careful agent. Think, then act with one command.<|im_end|>\n"
TASKS = [
    SYSTEM + "<|im_start|>user\nOpen the chest and take the coin.<|im_end|>\n<|im_start|>assistant\n",
    SYSTEM + "<|im_start|>user\nGo east.<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nhi<|im_end|>\n",
]
# per task: rows n, and a token limit per turn that differs, so rows leave the batch mid-way
SAMPLING = [
    SamplingParams(n=1, temperature=0, max_tokens=9, ignore_eos=True),
    SamplingParams(n=2, temperature=1.0, max_tokens=14, ignore_eos=True, seed=5),
    SamplingParams(n=3, temperature=0.8, top_p=0.9, max_tokens=6, ignore_eos=True, seed=6),
]
# logprobs of the two engines differ only by fp32 summation order (batches of other shapes and
# paddings, cached K/V computed in another batch): measured <= 3e-6 here; a wrong position or a
# stale K/V moves them by 1e-2 and more
ATOL = 2e-5


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """Grouped-query attention (4 query heads on 2 K/V heads: agentfly_sdpa's grouped path),
    large random weights so that outputs vary."""
    return build_tiny_model(
        tmp_path_factory.mktemp("prefix"), num_heads=4, num_kv_heads=2, initializer_range=0.2
    )


@pytest.fixture(scope="module")
def cached_run(model_dir):
    """An engine with the prefix cache, after three turns of chains; and its calls."""
    engine = engine_of(model_dir)
    return engine, run_chains(engine, first_prompts(engine.tokenizer), SAMPLING, turns=3)


@pytest.fixture(scope="module")
def uncached_run(model_dir):
    """The same three turns on an engine without it."""
    engine = engine_of(model_dir, enable_prefix_caching=False)
    return engine, run_chains(engine, first_prompts(engine.tokenizer), SAMPLING, turns=3)


def engine_of(model_dir, **kwargs) -> TransformersEngine:
    return TransformersEngine(model_dir, seed=0, device="cpu", **kwargs)


def first_prompts(tokenizer) -> list[list[int]]:
    prompts = [tokenizer.encode(t) for t in TASKS]
    assert prompts[0][:2 * BLOCK] == prompts[1][:2 * BLOCK]  # two tasks share two blocks
    assert len({len(p) for p in prompts}) == 3
    return prompts


def run_chains(engine, prompts, sampling, turns: int):
    """``turns`` calls; every chain's next prompt is its prompt + its sampled tokens + an
    observation of its own (a request's n rows become n chains). Returns per turn the
    (prompts, sampling, outputs) of that call."""
    calls = []
    for turn in range(turns):
        outputs = engine.generate(prompts, sampling)
        calls.append((prompts, sampling, outputs))
        chains = [(p, sp, out) for p, sp, outs in zip(prompts, sampling, outputs, strict=True) for out in outs]
        prompts = [
            p + out.token_ids + engine.tokenizer.encode(f"\nobservation {turn}.{c}: " + "x" * (3 * c))
            for c, (p, _, out) in enumerate(chains)
        ]
        sampling = [
            SamplingParams(**{**vars(sp), "n": 1, "seed": None if sp.seed is None else sp.seed + c})
            for c, (_, sp, _) in enumerate(chains)
        ]
    return calls


def assert_same(outputs, other_outputs) -> None:
    """Same tokens, log-probs within ``ATOL``, for every row of every prompt."""
    for per_prompt, other_per_prompt in zip(outputs, other_outputs, strict=True):
        for out, other in zip(per_prompt, other_per_prompt, strict=True):
            assert out.token_ids == other.token_ids
            assert torch.allclose(torch.tensor(out.logprobs), torch.tensor(other.logprobs), atol=ATOL)


def assert_same_calls(calls, other_calls) -> None:
    for (prompts, _, outputs), (other_prompts, _, other_outputs) in zip(calls, other_calls, strict=True):
        assert prompts == other_prompts
        assert_same(outputs, other_outputs)


def test_multi_turn_calls_equal_the_uncached_engine_and_prefill_only_the_new_tokens(
    cached_run, uncached_run
):
    (cached, calls), (uncached, uncached_calls) = cached_run, uncached_run
    assert_same_calls(calls, uncached_calls)

    # without the cache every call prefills its distinct prompts whole
    every_prompt = sum(len(q) for prompts, _, _ in calls for q in {tuple(p) for p in prompts})
    assert uncached.prefill_stats.prefilled_tokens == every_prompt
    assert uncached.prefill_stats.reused_tokens == 0
    # with it: turn 1 prefills everything (the store is empty); a later chain reuses the whole
    # blocks of its previous prompt + sampled tokens but the last (the K/V computed for them)
    reused = 0
    for (prompts, _, outputs), (next_prompts, _, _) in itertools.pairwise(calls):
        chains = [(p, out) for p, outs in zip(prompts, outputs, strict=True) for out in outs]
        for (p, out), next_prompt in zip(chains, next_prompts, strict=True):
            assert next_prompt[: len(p) + len(out.token_ids)] == p + out.token_ids
            computed = len(p) + len(out.token_ids) - 1
            reused += computed // BLOCK * BLOCK
    assert reused > 0
    assert cached.prefill_stats.reused_tokens == reused
    assert cached.prefill_stats.prefilled_tokens == every_prompt - reused


def test_the_reused_prefix_gives_a_plain_forward_pass_logprobs(model_dir, cached_run):
    """An independent reference: the last turn's log-probs from one unpadded forward pass."""
    from transformers import AutoModelForCausalLM

    reference = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    prompts, sampling, outputs = cached_run[1][-1]
    for prompt, sp, per_prompt in zip(prompts, sampling, outputs, strict=True):
        out = per_prompt[0]
        with torch.no_grad():
            logits = reference(torch.tensor([prompt + out.token_ids])).logits[0]  # (P + G, V)
        positions = torch.arange(len(prompt) - 1, len(prompt) - 1 + len(out.token_ids))
        logp = torch.log_softmax(logits[positions] / (sp.temperature or 1.0), -1)
        expected = logp[torch.arange(len(positions)), torch.tensor(out.token_ids)]
        assert torch.allclose(torch.tensor(out.logprobs), expected, atol=1e-4)


def test_new_weights_or_sleep_empty_the_store(model_dir, tmp_path):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from agentfly.core.weights import adapter_payload

    engine = engine_of(model_dir)
    prompts = first_prompts(engine.tokenizer)
    greedy = [SamplingParams(n=1, temperature=0, max_tokens=10, ignore_eos=True)] * len(prompts)
    second_prompts = run_chains(engine, prompts, greedy, turns=2)[-1][0]
    greedy = greedy[:1] * len(second_prompts)

    assert engine.prefill_stats.reused_tokens > 0

    def generate_counting_reuse(target):
        """The outputs of ``second_prompts`` and the tokens the call reused."""
        reused = target.prefill_stats.reused_tokens
        return target.generate(second_prompts, greedy), target.prefill_stats.reused_tokens - reused

    other = AutoModelForCausalLM.from_pretrained(
        build_tiny_model(tmp_path / "other", num_heads=4, num_kv_heads=2, initializer_range=0.2, seed=1)
    )
    fresh = engine_of(model_dir, enable_prefix_caching=False)
    for target in (engine, fresh):
        target.load_weights(other.state_dict())
    outputs, reused = generate_counting_reuse(engine)
    assert reused == 0  # nothing was left to reuse
    assert_same(outputs, fresh.generate(second_prompts, greedy))

    lora = get_peft_model(
        AutoModelForCausalLM.from_pretrained(model_dir),
        LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
    )
    torch.manual_seed(0)
    for name, param in lora.named_parameters():
        if "lora_B" in name:
            param.data.normal_(std=0.5)  # peft starts B at zero: a no-op adapter
    assert generate_counting_reuse(engine)[1] > 0  # the store is full again
    for target in (engine, fresh):
        target.load_weights(adapter_payload(lora))
    outputs, reused = generate_counting_reuse(engine)
    assert reused == 0
    assert_same(outputs, fresh.generate(second_prompts, greedy))

    assert generate_counting_reuse(engine)[1] > 0
    engine.sleep()
    engine.wake_up()
    assert generate_counting_reuse(engine)[1] == 0


def test_a_small_budget_evicts_and_keeps_outputs_exact(model_dir, uncached_run):
    config = uncached_run[0].model.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    block_bytes = config.num_hidden_layers * 2 * config.num_key_value_heads * BLOCK * head_dim * 4
    budget = 5 * block_bytes  # a few blocks of the ~40 the chains leave
    small = engine_of(model_dir, prefix_cache_max_gib=budget / 2**30)
    prompts = first_prompts(small.tokenizer)
    calls = run_chains(small, prompts, SAMPLING, turns=3)
    assert_same_calls(calls, uncached_run[1])
    stats = small.stats()
    assert stats["prefix_cache_bytes"] <= budget and stats["prefix_cache_blocks"] == 5
    assert small.prefill_stats.reused_tokens > 0


def test_a_prompt_cached_whole_still_prefills_its_last_block(model_dir):
    """A prompt of two whole blocks, stored by a call that sampled one token: the next call
    needs a logit from the prompt's last position, so it reuses one block and prefills one."""
    engine = engine_of(model_dir)
    prompt = first_prompts(engine.tokenizer)[0][: 2 * BLOCK]
    one = SamplingParams(temperature=0, max_tokens=1)
    first = engine.generate([prompt], one)[0][0]
    again = engine.generate([prompt], one)[0][0]
    assert engine.prefill_stats.reused_tokens == BLOCK
    assert engine.prefill_stats.prefilled_tokens == 2 * BLOCK + BLOCK
    assert again.token_ids == first.token_ids
    assert again.logprobs == pytest.approx(first.logprobs, abs=ATOL)


def test_a_sliding_window_model_reuses_nothing_and_says_why_once(tmp_path, caplog):
    """Its cache layers keep a window, not every position: the engine keeps no prefixes, and a
    warning (once, however many calls) and its stats name the layers."""
    import json

    path = build_tiny_model(tmp_path / "sliding", initializer_range=0.2)
    config = json.loads((path / "config.json").read_text())
    config.update(use_sliding_window=True, sliding_window=8, max_window_layers=0,
                  layer_types=["sliding_attention"] * config["num_hidden_layers"])
    (path / "config.json").write_text(json.dumps(config))
    with caplog.at_level("WARNING", logger="agentfly.rollout.engines.prefix_reuse"):
        engine = engine_of(path)
        run_chains(engine, first_prompts(engine.tokenizer), SAMPLING, turns=2)
    assert engine.prefill_stats.prefilled_tokens > 0
    assert engine.prefill_stats.reused_tokens == 0
    said = [r.getMessage() for r in caplog.records if "prefix caching is off" in r.getMessage()]
    assert len(said) == 1 and "DynamicSlidingWindowLayer" in said[0]
    assert "DynamicSlidingWindowLayer" in engine.stats()["prefix_cache_off"]
    assert engine.stats()["prefix_cache_bytes"] == 0


def test_prefix_caching_turned_off_by_hand_is_said_in_the_stats_without_a_warning(
    model_dir, caplog
):
    with caplog.at_level("WARNING", logger="agentfly.rollout.engines.prefix_reuse"):
        engine = engine_of(model_dir, enable_prefix_caching=False)
    assert engine.stats()["prefix_cache_off"] == "enable_prefix_caching=False"
    assert not caplog.records
    assert engine_of(model_dir).stats()["prefix_cache_off"] is None


def test_freeing_the_store_empties_it_and_later_calls_stay_exact_and_fill_it_again(
    model_dir, uncached_run
):
    """What the update does to an in-process engine's store (:meth:`free_prefix_cache`): every
    block goes, the bytes freed are what the blocks took (each block: layers x K and V x kv_heads x
    16 tokens x head_dim float32s), and the engine serves the next turns as an engine without the
    cache, reusing its own K/V again from the turn after."""
    uncached, _ = uncached_run
    config = uncached.model.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    block_bytes = config.num_hidden_layers * 2 * config.num_key_value_heads * BLOCK * head_dim * 4
    engine = engine_of(model_dir)
    greedy = SamplingParams(n=1, temperature=0, max_tokens=10, ignore_eos=True)
    prompts = first_prompts(engine.tokenizer)
    turn_two = run_chains(engine, prompts, [greedy] * len(prompts), turns=2)[-1][0]
    held = engine.stats()
    assert held["prefix_cache_blocks"] > 0
    assert held["prefix_cache_bytes"] == held["prefix_cache_blocks"] * block_bytes

    assert engine.free_prefix_cache() == held["prefix_cache_bytes"]
    assert engine.stats()["prefix_cache_bytes"] == 0 and engine.stats()["prefix_cache_blocks"] == 0
    reused = engine.prefill_stats.reused_tokens
    greedy = [greedy] * len(turn_two)
    outputs = engine.generate(turn_two, greedy)
    assert engine.prefill_stats.reused_tokens == reused  # nothing was left to reuse
    assert_same(outputs, uncached.generate(turn_two, greedy))
    turn_three = [
        p + outs[0].token_ids + engine.tokenizer.encode("\nobservation")
        for p, outs in zip(turn_two, outputs, strict=True)
    ]
    assert_same(engine.generate(turn_three, greedy), uncached.generate(turn_three, greedy))
    assert engine.prefill_stats.reused_tokens > reused  # the store filled again


# -- the store alone, on stand-in K/V (layers=1, 2, heads=1, T, dim=1: the value is the position)


def positions_kv(start: int, end: int) -> torch.Tensor:
    return torch.arange(start, end, dtype=torch.float32).reshape(1, 1, 1, -1, 1).expand(1, 2, 1, -1, 1)


def test_the_store_matches_the_longest_run_of_whole_blocks_and_asks_only_for_missing_ones():
    store = PrefixCache(max_bytes=10**6, block_size=4)
    asked = []

    def kv_of(start, end):
        asked.append((start, end))
        return positions_kv(start, end)

    store.insert(list(range(10)), kv_of)  # two whole blocks, the last 2 tokens dropped
    assert asked == [(0, 8)] and len(store) == 2
    store.insert(list(range(13)), kv_of)  # a third block, the first two stored already
    assert asked == [(0, 8), (8, 12)] and len(store) == 3
    length, kv = store.lookup([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 99, 99, 99], limit=12)
    assert length == 8 and kv[0, 1, 0, :, 0].tolist() == list(range(8))  # diverges in block 3
    assert store.lookup(list(range(13)), limit=11)[0] == 8  # the limit cuts to whole blocks
    assert store.lookup([1, 2, 3, 4, 5], limit=4) == (0, None)  # a prefix only from token 0


def test_the_store_evicts_leaves_first_and_stays_within_budget():
    block_bytes = positions_kv(0, 4).numel() * 4
    store = PrefixCache(max_bytes=3 * block_bytes, block_size=4)
    store.insert(list(range(8)), positions_kv)  # blocks A, A/B
    store.insert([0, 1, 2, 3, 50, 51, 52, 53], positions_kv)  # A/C: A is shared
    assert len(store) == 3
    store.lookup(list(range(8)), limit=8)  # A/B used last: C is the oldest leaf
    store.insert([0, 1, 2, 3, 4, 5, 6, 7, 60, 61, 62, 63], positions_kv)  # A/B/D: evicts C
    assert store.bytes <= store.max_bytes and len(store) == 3
    assert store.lookup([0, 1, 2, 3, 50, 51, 52, 53], limit=8)[0] == 4  # C gone, A kept
    assert store.lookup([0, 1, 2, 3, 4, 5, 6, 7, 60, 61, 62, 63], limit=12)[0] == 12


def test_eviction_keeps_a_parent_while_its_child_goes():
    block_bytes = positions_kv(0, 4).numel() * 4
    store = PrefixCache(max_bytes=2 * block_bytes, block_size=4)
    store.insert(list(range(8)), positions_kv)  # A, A/B
    store.insert([9, 9, 9, 9], positions_kv)  # E: one block must go, the leaf B (not A)
    assert len(store) == 2
    assert store.lookup(list(range(8)), limit=8)[0] == 4
