"""Padding-free forward passes: a micro-batch's rows packed into one sequence (verl's
``use_remove_padding``).

The collate layout (prompts left-padded to ``P``, responses right-padded to ``T``) spends
``B × (P + T)`` positions on ``Σ_b real_b`` tokens; packing runs only the real ones, as one
sequence of shape (1, N). Each row keeps its own position ids (the batch's, so they restart at
every row), and attention never crosses rows:

- ``agentfly_sdpa`` (what an ``sdpa`` model runs here, :mod:`agentfly.models.attention`) is
  given each token's row in place of a mask and attends row by row, causal, without a mask:
  ``Σ_b len_b²`` of attention, no more than the padded pass's ``B × L²``;
- under any other attention the model is given no mask, and transformers reads the row
  boundaries off the restarting position ids (``find_packed_sequence_indices``): flash
  attention (``flash_attention_2``/``_3``) runs its varlen kernel, ``flex_attention`` a block
  mask, ``sdpa`` and ``eager`` a block-diagonal causal mask of (N, N) built in the form each
  kernel reads (boolean for sdpa, additive for eager; handing eager a boolean mask, which it
  adds to the scores, would mask nothing).

The results are put back in the (B, T) response layout, zeros where a row has no response token.

Departure from the padded path (:mod:`agentfly.modules.response_logits`): the shared-prompt KV
trick is not used while packing (a row's prompt and response run together), and padding
positions of the returned tensors hold zeros instead of the values a padded pass computes there
(no loss reads them: every loss is masked).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Packing:
    """Where a padded batch's real tokens sit in the packed sequence.

    Attributes:
        input_ids: the real tokens, row after row. Shape: (1, N).
        position_ids: their position ids (each row's own, restarting). Shape: (1, N).
        rows: the row each packed token comes from. Shape: (N,).
        response: which response positions are real tokens. Shape: (B, T), bool.
        predictors: the packed index of the token that predicts each real response token (the
            token just before it in its row), in ``response``'s row-major order. Shape: (K,).
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    rows: torch.Tensor
    response: torch.Tensor
    predictors: torch.Tensor

    def attention_mask(self, model: Any) -> torch.Tensor | None:
        """What to pass as the mask (the module docstring): the rows under ``agentfly_sdpa``
        ((1, 1, 1, N) long, :func:`~agentfly.models.attention.packed_rows`), else None."""
        from agentfly.models.attention import NAME, packed_rows

        implementation = str(getattr(getattr(model, "config", None), "_attn_implementation", ""))
        return packed_rows(self.rows) if implementation == NAME else None

    def unpack(self, packed: torch.Tensor) -> torch.Tensor:
        """Values at :attr:`predictors` ((K, ...)) in the response layout, zeros elsewhere.
        Shape: (B, T, ...)."""
        out = packed.new_zeros(*self.response.shape, *packed.shape[1:])  # (B, T, ...)
        out[self.response] = packed
        return out


def pack(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    prompt_length: int,
) -> Packing:
    """Pack the real tokens (``attention_mask == 1``) of a (B, P + T) batch, rows in order.

    A row's first real response token must follow a real prompt token (every row has a prompt).
    """
    real = attention_mask.bool()  # (B, L)
    flat = real.flatten()  # (B * L,)
    index = flat.nonzero().squeeze(1)  # (N,) flat positions of the real tokens
    slot = flat.long().cumsum(0) - 1  # (B * L,) packed index of each real token
    response = real[:, prompt_length:]  # (B, T)
    predictors = slot.view(real.shape)[:, prompt_length:][response] - 1  # (K,)
    return Packing(
        input_ids=input_ids.flatten()[index][None],  # (1, N)
        position_ids=position_ids.flatten()[index][None],  # (1, N)
        rows=torch.div(index, real.shape[1], rounding_mode="floor"),  # (N,)
        response=response,
        predictors=predictors,
    )


def packed_response_logits(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    prompt_length: int,
) -> torch.Tensor:
    """:func:`~agentfly.modules.response_logits.response_logits` over the packed rows: the LM head
    runs on the K positions that predict real response tokens only.

    Returns:
        (B, T, V) logits in the model's dtype, zeros at padding positions.
    """
    packing = pack(input_ids, attention_mask, position_ids, prompt_length)
    out = model(
        input_ids=packing.input_ids,
        attention_mask=packing.attention_mask(model),
        position_ids=packing.position_ids,
        use_cache=False,
        logits_to_keep=packing.predictors,
    )
    return packing.unpack(out.logits[0])  # (K, V) -> (B, T, V)


def packed_values(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    prompt_length: int,
) -> torch.Tensor:
    """A value model's (token classification, one label) outputs at the positions that predict
    response tokens, over the packed rows. Shape: (B, T), zeros at padding positions."""
    packing = pack(input_ids, attention_mask, position_ids, prompt_length)
    out = model(
        input_ids=packing.input_ids,
        attention_mask=packing.attention_mask(model),
        position_ids=packing.position_ids,
        use_cache=False,  # with a cache transformers would not read the rows off the positions
    ).logits  # (1, N, 1)
    return packing.unpack(out[0, packing.predictors, 0])  # (K,) -> (B, T)
