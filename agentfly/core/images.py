"""Images in a chain, as the model sees them: one record from the engine to the loss.

An image enters a chain once (a data row's picture, a screenshot a tool or environment returns)
and is turned into the model's inputs once, by the model's image processor
(:class:`agentfly.rollout.vision.VisionProcessor`): the pixel patches and the patch grid. The
engine generates from those tensors and the trainer's forward reads the same tensors from the
trajectory, so what the trainer scores is what the engine saw; nothing is decoded or re-encoded
on the way.

In the token ids an image is its placeholder run: ``<|vision_start|>``, ``num_tokens`` image pad
tokens, ``<|vision_end|>`` (Qwen2.5-VL's layout). A chain's images are kept in the order their
runs appear in its prompt and response.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True, eq=False)
class ImageInput:
    """One image, processed.

    Attributes:
        pixel_values: the image's flattened patches, as the vision tower takes them.
            Shape: (grid_t * grid_h * grid_w, channels * temporal_patch * patch * patch), float32.
        grid_thw: the patch grid ``(t, h, w)``.
        num_tokens: the image pad tokens standing for it in the ids: ``t * h * w / merge**2``.
        digest: SHA-256 of the pixel values and the grid: equal digests are the same inputs (a
            key for caches; a changed pixel changes it).
    """

    pixel_values: torch.Tensor
    grid_thw: tuple[int, int, int]
    num_tokens: int
    digest: str = field(default="")

    def __post_init__(self) -> None:
        if not self.digest:
            object.__setattr__(self, "digest", pixel_digest(self.pixel_values, self.grid_thw))


def pixel_digest(pixel_values: torch.Tensor, grid_thw: tuple[int, int, int]) -> str:
    """SHA-256 of the pixel values' bytes (contiguous, on the CPU) and the grid."""
    h = hashlib.sha256(repr(tuple(grid_thw)).encode())
    h.update(pixel_values.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


class ImagePrompt(list):
    """Token ids (a ``list[int]``) with the images its placeholder runs stand for, in order.

    What the agent loop hands an engine for a prompt holding images; an engine that reads
    ``images`` generates from them, and a plain ``list[int]`` prompt is a prompt without images.
    Pickles with its images (Ray carries it to engine actors).
    """

    def __init__(self, ids: list[int], images: list[ImageInput] | tuple[ImageInput, ...] = ()) -> None:
        super().__init__(ids)
        self.images = tuple(images)

    def __reduce__(self):  # a list subclass pickles its items and its attribute
        return (ImagePrompt, (list(self), self.images))


def prompt_images(prompt: list[int]) -> tuple[ImageInput, ...]:
    """The images of an engine prompt (none for a plain ``list[int]``)."""
    return getattr(prompt, "images", ())
