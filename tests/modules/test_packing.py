"""Padding-free packing equals the padded computation: log-probs, values and their gradients,
under every attention kind that runs here (eager, sdpa, agentfly's grouped sdpa; flex attention
where this torch runs it)."""

from __future__ import annotations

import pytest
import torch

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


def flex_runs() -> bool:
    try:
        from torch.nn.attention.flex_attention import flex_attention

        q = torch.zeros(1, 1, 16, 8, requires_grad=True)
        flex_attention(q, q, q).sum().backward()  # no backward on CPU in torch 2.13
        return True
    except Exception:
        return False


ATTENTION = ["eager", "sdpa", "agentfly_sdpa",
             pytest.param("flex_attention", marks=pytest.mark.skipif(not flex_runs(), reason="flex attention does not train here (no backward on CPU)"))]


@pytest.fixture(scope="module", params=ATTENTION)
def model(path, request):
    from agentfly.modules.policy_model import build_policy_model

    settings = ModelSettings(path=str(path), attn_implementation=request.param)
    model = build_policy_model(settings).train()
    assert model.config._attn_implementation == request.param
    return model


@pytest.fixture(scope="module", params=ATTENTION)
def critic(path, request):
    update = UpdateSettings(name="critic", mini_batch_size=4)
    critic = build_critic_model(
        CriticSettings(path=str(path), update=update, attn_implementation=request.param),
        ModelSettings(path=str(path)),
    )
    assert critic.config._attn_implementation == request.param
    return critic


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


def test_agentfly_sdpa_is_given_the_rows_and_every_other_attention_no_mask():
    from types import SimpleNamespace

    ids, mask, pos, p, _ = batch(50)
    packing = pack(ids, mask, pos, p)
    rows = packing.attention_mask(SimpleNamespace(config=SimpleNamespace(_attn_implementation="agentfly_sdpa")))
    assert rows.shape == (1, 1, 1, 27) and rows[0, 0, 0].tolist() == packing.rows.tolist()
    for other in ("eager", "sdpa", "flash_attention_2", "flex_attention"):
        assert packing.attention_mask(SimpleNamespace(config=SimpleNamespace(_attn_implementation=other))) is None


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
    # within 1e-5 of each gradient's scale: an entry near 24 carries fp32 sums' rounding of a
    # few 1e-5 on one CPU and not another (the order of a row's sums differs in the two passes)
    for a, b in zip(g_packed, g_padded, strict=True):
        assert (a - b).abs().max() <= 1e-5 * b.abs().max() + 1e-6, ((a - b).abs().max(), b.abs().max())


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
