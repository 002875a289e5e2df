"""Padding-free packing equals the padded computation: log-probs, values and their gradients."""

from __future__ import annotations

import pytest
import torch

from agentfly.models.attention import use_grouped_sdpa
from agentfly.models.tiny import build_tiny_model
from agentfly.modules.losses import logprobs_from_logits
from agentfly.modules.packing import pack, packed_response_logits, packed_values
from agentfly.modules.policy_model import build_critic_model
from agentfly.modules.response_logits import response_logits
from agentfly.modules.settings import CriticSettings, ModelSettings, UpdateSettings


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    # grouped K/V heads: agentfly_sdpa's masked grouped path is the one that runs
    return build_tiny_model(tmp_path_factory.mktemp("pack"), num_kv_heads=2, initializer_range=0.2)


@pytest.fixture(scope="module")
def model(path):
    from transformers import AutoModelForCausalLM

    return use_grouped_sdpa(AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)).train()


@pytest.fixture(scope="module")
def critic(path):
    update = UpdateSettings(name="critic", mini_batch_size=4)
    return build_critic_model(
        CriticSettings(path=str(path), update=update), ModelSettings(path=str(path))
    )


def batch(vocab: int, p: int = 6, t: int = 5):
    """Four rows, mixed prompt (left-padded) and response (right-padded) lengths."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, vocab, (4, p + t), generator=g)
    mask = torch.ones(4, p + t, dtype=torch.long)
    for row, (prompt, response) in enumerate([(6, 5), (2, 3), (4, 1), (1, 5)]):
        mask[row, : p - prompt] = 0
        mask[row, p + response :] = 0
    ids = ids * mask  # padding holds the pad id 0
    return ids, mask, (mask.cumsum(-1) - 1).clamp(min=0), p, t


def test_pack_keeps_only_real_tokens_and_restarts_positions():
    ids, mask, pos, p, _ = batch(50)
    packing = pack(ids, mask, pos, p)
    assert packing.input_ids.shape == (1, int(mask.sum()))
    assert packing.rows.tolist() == [0] * 11 + [1] * 5 + [2] * 5 + [3] * 6
    assert packing.position_ids[0].tolist() == [*range(11), *range(5), *range(5), *range(6)]
    # each predictor is the packed token just before a real response token of the same row
    targets = packing.input_ids[0, packing.predictors + 1]
    assert torch.equal(targets, ids[:, p:][packing.response])


def test_the_mask_is_block_diagonal_and_causal():
    ids, mask, pos, p, _ = batch(50)
    m = pack(ids, mask, pos, p).attention_mask(None)[0, 0]
    assert m[11, 10].item() is False  # row 1's first token does not see row 0
    assert m[12, 11].item() is True and m[11, 12].item() is False


def test_log_probs_and_gradients_equal_the_padded_pass(model):
    ids, mask, pos, p, t = batch(model.config.vocab_size)
    params = [q for q in model.parameters() if q.requires_grad]
    keep = mask[:, p:].float()  # (B, T)
    weights = torch.randn(keep.shape, generator=torch.Generator().manual_seed(1))

    def logp_and_grads(logits):
        logp = logprobs_from_logits(logits.float(), ids[:, p:])  # (B, T)
        return logp * keep, torch.autograd.grad((logp * weights * keep).sum(), params)

    padded, g_padded = logp_and_grads(
        response_logits(model, ids, mask, pos, p, t, share_prompts=False)
    )
    packed, g_packed = logp_and_grads(packed_response_logits(model, ids, mask, pos, p))
    assert torch.allclose(packed, padded, atol=1e-5)
    for a, b in zip(g_packed, g_padded, strict=True):
        assert torch.allclose(a, b, atol=1e-5)


def test_values_and_gradients_equal_the_padded_pass(critic):
    ids, mask, pos, p, t = batch(critic.config.vocab_size)
    params = list(critic.parameters())
    keep = mask[:, p:].float()
    padded = critic(input_ids=ids, attention_mask=mask, position_ids=pos).logits[
        :, p - 1 : p - 1 + t, 0
    ]
    packed = packed_values(critic, ids, mask, pos, p)
    assert torch.allclose(packed * keep, padded * keep, atol=1e-5)
    g_padded = torch.autograd.grad((padded * keep).pow(2).sum(), params)
    g_packed = torch.autograd.grad((packed * keep).pow(2).sum(), params)
    for a, b in zip(g_packed, g_padded, strict=True):
        assert (a - b).abs().max() <= 1e-5 * b.abs().max() + 1e-6, (
            (a - b).abs().max(),
            b.abs().max(),
        )
