"""Logits at the positions that predict response tokens, computing only what the loss reads.

Two savings over ``model(input_ids).logits[:, P - 1 : P - 1 + T]``, both exact up to float
rounding:

- The LM head runs on the ``T`` response positions only (``logits_to_keep``), not on the prompt:
  with a 49k vocabulary the head is a fifth of a small model's FLOPs per position, and the
  ``(B, P + T, V)`` logits tensor (and its gradient) is the largest tensor of the step.
- Shared prompts run once. GRPO's chains of one prompt share their prompt ids, so the prompt
  is encoded once per distinct prompt (with gradient), its key/value cache is gathered to every
  row, and only the responses run per row. Gradients flow back through the gathered cache into
  the one prompt pass, so the result is the same as running every row whole. (The idea of
  verl's and others' "shared prefix" training; here without a custom attention kernel, through
  the model's own KV cache.)

The shared path needs a model that takes ``past_key_values`` and ``logits_to_keep`` (every
Hugging Face causal LM does) and is skipped under gradient checkpointing (which refuses a cache
in training), when no prompt is shared, or when the model does not return a cache.
"""

from __future__ import annotations

from typing import Any

import torch

from agentfly.core.batch import RolloutBatch
from agentfly.models.vision_inputs import vision_response_logits
from agentfly.modules.fsdp import is_sharded
from agentfly.modules.packing import packed_response_logits


def batch_response_logits(model: Any, batch: RolloutBatch, *, remove_padding: bool) -> torch.Tensor:
    """The logits predicting a batch's response tokens, by the path its rows take: a batch whose
    rows hold images runs whole, with its pixels (:mod:`agentfly.models.vision_inputs`); with
    ``remove_padding`` the rows run packed (:mod:`agentfly.modules.packing`: zeros at padding
    positions); else :func:`response_logits` (shared prompts encoded once).

    Returns:
        (B, T, V) in the model's dtype (under
        :func:`~agentfly.modules.linear_logprobs.hidden_instead_of_logits`, (B, T, H) hidden states).
    """
    if batch.images is not None:
        return vision_response_logits(
            model, batch.input_ids, batch.attention_mask, batch.images, batch.response_length
        )
    inputs = (model, batch.input_ids, batch.attention_mask, batch.position_ids, batch.prompt_length)
    if remove_padding:
        return packed_response_logits(*inputs)
    return response_logits(*inputs, batch.response_length)


def distinct_prompts(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, prompt_length: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The first row of each distinct (left-padded) prompt, and each row's prompt.

    Returns:
        ``(first, inverse)``: ``first`` (U,) row indices of the distinct prompts, ``inverse``
        (B,) the position in ``first`` of each row's prompt.
    """
    ids = input_ids[:, :prompt_length].cpu()  # (B, P)
    mask = attention_mask[:, :prompt_length].cpu()  # (B, P)
    seen: dict[bytes, int] = {}
    first: list[int] = []
    inverse: list[int] = []
    for row in range(ids.shape[0]):
        key = ids[row].numpy().tobytes() + mask[row].numpy().tobytes()
        if key not in seen:
            seen[key] = len(first)
            first.append(row)
        inverse.append(seen[key])
    device = input_ids.device
    return torch.tensor(first, device=device), torch.tensor(inverse, device=device)


def response_logits(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    prompt_length: int,
    response_length: int,
    *,
    share_prompts: bool = True,
) -> torch.Tensor:
    """Logits predicting each response token: position ``P - 1 + t`` predicts response ``t``.

    Args:
        model: a Hugging Face causal LM.
        input_ids, attention_mask, position_ids: (B, P + T), prompts left-padded to ``P``,
            responses right-padded to ``T`` (:mod:`agentfly.rollout.collate`'s layout).
        prompt_length: ``P``.
        response_length: ``T``.
        share_prompts: encode each distinct prompt once (see the module docstring).

    Returns:
        (B, T, V) logits in the model's dtype.
    """
    p, t = prompt_length, response_length
    # FSDP: every rank must run the same number of forward passes (each is a collective), and
    # whether prompts are shared depends on each rank's data, so sharded models take one pass
    share_prompts = share_prompts and not is_sharded(model)
    if share_prompts and p > 0 and not getattr(model, "is_gradient_checkpointing", False):
        first, inverse = distinct_prompts(input_ids, attention_mask, p)
        if len(first) < input_ids.shape[0]:
            shared = _shared_prompt_logits(
                model, input_ids, attention_mask, position_ids, p, t, first, inverse
            )
            if shared is not None:
                return shared
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        use_cache=False,
        logits_to_keep=t + 1,
    )
    return out.logits[:, :-1]  # (B, T, V): positions P - 1 .. P + T - 2


def _shared_prompt_logits(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    p: int,
    t: int,
    first: torch.Tensor,
    inverse: torch.Tensor,
) -> torch.Tensor | None:
    prefix = model(
        input_ids=input_ids[first, :p],
        attention_mask=attention_mask[first, :p],
        position_ids=position_ids[first, :p],
        use_cache=True,
        logits_to_keep=1,
    )  # logits (U, 1, V)
    cache = prefix.past_key_values
    if cache is None or not hasattr(cache, "reorder_cache"):
        return None
    cache.reorder_cache(inverse)  # (U, ...) -> (B, ...): a gather, differentiable
    rest = model(
        input_ids=input_ids[:, p:],
        attention_mask=attention_mask,
        position_ids=position_ids[:, p:],
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=t,
    )  # logits (B, T, V): positions P .. P + T - 1
    head = prefix.logits[:, -1:].index_select(0, inverse)  # (B, 1, V): position P - 1
    return torch.cat([head, rest.logits[:, :-1]], dim=1)  # (B, T, V)
