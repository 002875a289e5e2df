"""Response logits computed with shared prompts and a trimmed LM head equal a plain forward."""

from __future__ import annotations

import pytest
import torch

from agentfly.models.tiny import build_tiny_model
from agentfly.modules.response_logits import distinct_prompts, response_logits


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from transformers import AutoModelForCausalLM

    path = build_tiny_model(tmp_path_factory.mktemp("rl"), initializer_range=0.2)
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).train()


def batch(vocab: int, p: int = 7, t: int = 5):
    """Two prompts (one left-padded) x 3 chains, right-padded responses: the collate layout."""
    g = torch.Generator().manual_seed(0)
    prompts = torch.randint(3, vocab, (2, p), generator=g)
    prompt_mask = torch.ones(2, p, dtype=torch.long)
    prompt_mask[1, :3] = 0
    ids = torch.cat(
        [prompts.repeat_interleave(3, 0), torch.randint(3, vocab, (6, t), generator=g)], 1
    )
    mask = torch.cat([prompt_mask.repeat_interleave(3, 0), torch.ones(6, t, dtype=torch.long)], 1)
    mask[0, -2:] = 0  # a shorter response
    ids[0, -2:] = 0
    return ids, mask, (mask.cumsum(-1) - 1).clamp(min=0)


def test_distinct_prompts():
    ids, mask, _ = batch(50)
    first, inverse = distinct_prompts(ids, mask, 7)
    assert first.tolist() == [0, 3] and inverse.tolist() == [0, 0, 0, 1, 1, 1]


@pytest.mark.parametrize("share", [True, False])
def test_equal_to_a_plain_forward_with_gradients(model, share):
    ids, mask, pos = batch(model.config.vocab_size)
    p, t = 7, 5
    params = list(model.parameters())
    plain = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False).logits
    plain = plain[:, p - 1 : p - 1 + t]  # (B, T, V)
    weights = torch.randn(plain.shape, generator=torch.Generator().manual_seed(1))
    keep = mask[:, p:, None]  # padding positions are never read
    grads_plain = torch.autograd.grad((plain * weights * keep).sum(), params)
    fast = response_logits(model, ids, mask, pos, p, t, share_prompts=share)
    assert fast.shape == plain.shape
    assert torch.allclose(fast * keep, plain * keep, atol=1e-5)
    grads = torch.autograd.grad((fast * weights * keep).sum(), params)
    for a, b in zip(grads, grads_plain, strict=True):
        assert (a - b).abs().max() <= 1e-5 * b.abs().max() + 1e-6  # fp32 summation order only
