"""A vision-language model's extra inputs, built the same way by the engine and the trainer.

A batch row's images (:class:`~agentfly.core.images.ImageInput`, in the order of their
placeholder runs) become one ``pixel_values`` (their patches, concatenated row by row) and one
``image_grid_thw`` (a grid per image); the rotary positions are the model's own multimodal ones
(Qwen2.5-VL's ``get_rope_index``: text tokens count up, an image's tokens take its grid's
temporal, height and width indices), computed from the ids, the grids and the attention mask so
that left padding does not move them. The engine's prefill and the trainer's forward call the
same functions on the same tensors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from agentfly.core.images import ImageInput


def image_tensors(
    images: Sequence[ImageInput], device: torch.device | str
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(pixel_values, image_grid_thw)`` of ``images`` in order: (N, D) float32 and (n, 3) long."""
    pixel_values = torch.cat([im.pixel_values for im in images]).to(device)
    grid = torch.tensor([im.grid_thw for im in images], dtype=torch.long, device=device)
    return pixel_values, grid


def _rope_owner(model: Any) -> Any:
    """The module holding ``get_rope_index`` inside ``model`` (peft, FSDP and the
    ``...ForConditionalGeneration`` wrapper looked through)."""
    seen = model
    for _ in range(8):
        if hasattr(seen, "get_rope_index"):
            return seen
        for name in ("module", "base_model", "model"):
            inner = getattr(seen, name, None)
            if inner is not None and inner is not seen:
                seen = inner
                break
        else:
            break
    raise TypeError(f"{type(model).__name__} has no multimodal rotary index (get_rope_index): not a Qwen-VL model")


def image_token_id(model: Any) -> int:
    """The id of the model's image pad token (its config's ``image_token_id``)."""
    owner = _rope_owner(model)
    return int(owner.config.image_token_id)


def rope_positions(
    model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, grid_thw: torch.Tensor
) -> torch.Tensor:
    """The model's multimodal rotary positions of a batch. Shape: (3, B, L), long.

    Args:
        input_ids, attention_mask: (B, L), padding anywhere (it gets position 1, unread).
        grid_thw: (n, 3), the grids of every image in the batch, in order.
    """
    owner = _rope_owner(model)
    mm_token_type_ids = (input_ids == int(owner.config.image_token_id)).int()
    positions, _ = owner.get_rope_index(
        input_ids, mm_token_type_ids, image_grid_thw=grid_thw, attention_mask=attention_mask
    )
    return positions


def vision_response_logits(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    images: Sequence[Sequence[ImageInput]],
    response_length: int,
) -> torch.Tensor:
    """Logits predicting each response token of a batch whose rows hold images: one forward
    over the whole rows (position ``P - 1 + t`` predicts response ``t``). Shape: (B, T, V).

    Args:
        images: each row's images, in the order of its placeholder runs.
    """
    flat = [im for row in images for im in row]
    pad = image_token_id(model)
    counted = int((input_ids == pad).sum())
    expected = sum(im.num_tokens for im in flat)
    if counted != expected:
        raise ValueError(
            f"the batch holds {counted} image tokens but its images stand for {expected}: a "
            "trajectory's ids and images disagree"
        )
    kwargs: dict[str, Any] = {"position_ids": (attention_mask.cumsum(-1) - 1).clamp(min=0)}
    if flat:
        pixel_values, grid = image_tensors(flat, input_ids.device)
        dtype = next(model.parameters()).dtype
        kwargs = {"pixel_values": pixel_values.to(dtype), "image_grid_thw": grid}
        kwargs["position_ids"] = rope_positions(model, input_ids, attention_mask, grid)
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        use_cache=False,
        logits_to_keep=response_length + 1,
        **kwargs,
    )
    return out.logits[:, :-1]  # (B, T, V)
