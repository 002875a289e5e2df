"""agentfly_sdpa: grouped-query attention without the K/V copy, against transformers' eager.

Eager attention is an independent implementation (explicit ``repeat_kv``, matmul, softmax), so
outputs and gradients of a grouped-query model under a padding mask are compared with it, and
with transformers' own ``sdpa``.
"""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from agentfly.models.attention import NAME, use_grouped_sdpa
from agentfly.models.tiny import build_tiny_model


@pytest.fixture(scope="module")
def gqa_model_dir(tmp_path_factory):
    # 4 query heads on 2 K/V heads (groups of 2), head_dim 16
    return build_tiny_model(
        tmp_path_factory.mktemp("gqa"), num_heads=4, num_kv_heads=2, initializer_range=0.2
    )


def _load(path, attn):
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation=attn)


def _batch():
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(5, 300, (3, 12), generator=g)
    mask = torch.ones(3, 12, dtype=torch.long)
    mask[0, :5] = 0  # left padding of different widths
    mask[1, :2] = 0
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids, mask, position_ids


def _forward_backward(model):
    ids, mask, position_ids = _batch()
    model.zero_grad()
    logits = model(input_ids=ids, attention_mask=mask, position_ids=position_ids).logits
    (logits * mask[..., None]).square().mean().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logits.detach() * mask[..., None], grads


def test_switches_sdpa_and_leaves_other_choices(gqa_model_dir, tmp_path):
    model = use_grouped_sdpa(_load(gqa_model_dir, "sdpa"))
    assert model.config._attn_implementation == NAME
    # an exported actor must load anywhere: the choice is not written into config.json
    model.save_pretrained(tmp_path / "export")
    assert NAME not in (tmp_path / "export" / "config.json").read_text()
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "export")
    assert reloaded.config._attn_implementation == "sdpa"
    eager = use_grouped_sdpa(_load(gqa_model_dir, "eager"))
    assert eager.config._attn_implementation == "eager"


def test_outputs_and_gradients_equal_eager_attention(gqa_model_dir):
    grouped = use_grouped_sdpa(_load(gqa_model_dir, "sdpa"))
    called = []
    from transformers import AttentionInterface

    inner = AttentionInterface._global_mapping[NAME]
    AttentionInterface._global_mapping[NAME] = lambda *a, **k: (called.append(1), inner(*a, **k))[1]
    try:
        got_logits, got_grads = _forward_backward(grouped)
    finally:
        AttentionInterface._global_mapping[NAME] = inner
    assert called, "the grouped attention was not used"
    for attn in ("eager", "sdpa"):
        want_logits, want_grads = _forward_backward(_load(gqa_model_dir, attn))
        torch.testing.assert_close(got_logits, want_logits, atol=1e-5, rtol=1e-4)
        assert got_grads.keys() == want_grads.keys()
        for name in want_grads:
            torch.testing.assert_close(
                got_grads[name], want_grads[name], atol=1e-5, rtol=1e-4, msg=name
            )


def test_cached_decoding_equals_eager(gqa_model_dir):
    """One left-padded prefill then 4 decode steps with a growing mask, as the HF engine runs."""

    def decode(model):
        ids, mask, positions = _batch()
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
        cache, logits, steps = out.past_key_values, out.logits[:, -1], []
        pos = positions[:, -1:]
        for _ in range(4):
            token = logits.argmax(-1, keepdim=True)
            steps.append(token)
            mask = torch.cat([mask, mask.new_ones(3, 1)], -1)
            pos = pos + 1
            out = model(
                input_ids=token,
                attention_mask=mask,
                position_ids=pos,
                past_key_values=cache,
                use_cache=True,
            )
            cache, logits = out.past_key_values, out.logits[:, -1]
        return torch.cat(steps, -1), logits

    with torch.no_grad():
        got_tokens, got_logits = decode(use_grouped_sdpa(_load(gqa_model_dir, "sdpa")))
        want_tokens, want_logits = decode(_load(gqa_model_dir, "eager"))
    assert torch.equal(got_tokens, want_tokens)
    torch.testing.assert_close(got_logits, want_logits, atol=1e-5, rtol=1e-4)


def test_hf_engine_uses_it_unless_told_otherwise(gqa_model_dir):
    from agentfly.rollout.engines.transformers_engine import TransformersEngine

    assert TransformersEngine(gqa_model_dir, device="cpu").model.config._attn_implementation == NAME
    assert (
        TransformersEngine(
            gqa_model_dir, device="cpu", attn_implementation="eager"
        ).model.config._attn_implementation
        == "eager"
    )
