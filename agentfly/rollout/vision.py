"""Images into a chain: reading them from data rows, processing them once, and their tokens.

:class:`VisionProcessor` wraps the model's image processor (Qwen2-VL's: 14-pixel patches merged
2 × 2 into one token) and its placeholder tokens. A template renders each image as one
``<|vision_start|><|image_pad|><|vision_end|>``; :meth:`VisionProcessor.expand` widens each
single pad to the image's token count, so the ids hold exactly the tokens the model's vision
tower fills. Images are bytes of an image file (PNG for screenshots) until processed; a
processed image is an :class:`~agentfly.core.images.ImageInput`, kept by the trajectory and read
by both the engine and the trainer.

Data rows give images in ``images`` (verl's and AgentFly's field): each a path (relative to the
data file), ``{"path": ...}``, ``{"bytes": <base64>}`` or a ``data:image/...;base64,`` URI. The
question's ``<image>`` markers place them (verl's convention); without markers they come before
the question's text. :func:`resolve_row_images` checks them when the data is loaded, naming the
file, the row and the image that cannot be read.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
from collections import OrderedDict
from pathlib import Path
from typing import Any

from agentfly.core.errors import InputError
from agentfly.core.images import ImageInput

IMAGE_MARKER = "<image>"
VISION_START, VISION_END, IMAGE_PAD = "<|vision_start|>", "<|vision_end|>", "<|image_pad|>"
VIDEO_PAD = "<|video_pad|>"


class ImageError(InputError):
    """An image that cannot be read or processed, named by where it came from."""


# ---------------------------------------------------------------------------- data rows


def resolve_row_images(row: dict[str, Any], base_dir: Path, where: str) -> None:
    """Check ``row["images"]`` (if any) and make its paths absolute, in place.

    Args:
        row: a data row.
        base_dir: the data file's folder (relative paths start there).
        where: the file and row, for messages (``"data.json: row 3"``).

    Raises:
        ImageError: an image is missing, not an image file, or given in a form not understood.
    """
    images = row.get("images")
    if images is None:
        return
    if not isinstance(images, list):
        raise ImageError(f"{where}: 'images' must be a list, got {type(images).__name__}")
    resolved = []
    for k, spec in enumerate(images):
        if isinstance(spec, dict) and "path" in spec:
            spec = spec["path"]
        if isinstance(spec, str) and not spec.startswith("data:"):
            path = local_image(spec, base_dir)
            if not path.is_file():
                raise ImageError(f"{where}: image {k} ({spec!r}) does not exist (looked for {path})")
            spec = str(path)
        resolved.append(spec)
        _check_decodes(image_bytes(spec, f"{where}: image {k}"), f"{where}: image {k}")
    row["images"] = resolved
    question = next((row[key] for key in ("question", "prompt") if isinstance(row.get(key), str)), "")
    markers = question.count(IMAGE_MARKER)
    if markers and markers != len(resolved):
        raise ImageError(
            f"{where}: the question has {markers} {IMAGE_MARKER} markers but the row has "
            f"{len(resolved)} images"
        )


def local_image(path: str, base_dir: Path) -> Path:
    """The file an image path names: an absolute path as is, a relative one under ``base_dir``
    (the data file's folder)."""
    return Path(path) if os.path.isabs(path) else base_dir / path


def image_bytes(spec: Any, where: str) -> bytes:
    """The bytes of an image given as a path, ``{"bytes": base64}``, a data URI or bytes."""
    try:
        if isinstance(spec, bytes | bytearray):
            return bytes(spec)
        if isinstance(spec, dict) and "bytes" in spec:
            data = spec["bytes"]
            return data if isinstance(data, bytes) else base64.b64decode(data, validate=True)
        if isinstance(spec, str) and spec.startswith("data:"):
            return base64.b64decode(spec.split(",", 1)[1], validate=True)
        if isinstance(spec, str):
            return Path(spec).read_bytes()
    except (OSError, ValueError) as e:
        raise ImageError(f"{where}: cannot read the image: {e}") from None
    raise ImageError(
        f"{where}: an image is a path, {{'path': ...}}, {{'bytes': <base64>}} or a data URI; "
        f"got {type(spec).__name__}"
    )


def _check_decodes(data: bytes, where: str) -> None:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as img:
            img.verify()
    except (UnidentifiedImageError, OSError, SyntaxError) as e:
        raise ImageError(f"{where}: not a readable image file ({e})") from None


def row_image_bytes(row: dict[str, Any], where: str) -> list[bytes]:
    """The bytes of every image of a data row, in order."""
    return [image_bytes(spec, f"{where}: image {k}") for k, spec in enumerate(row.get("images") or [])]


def user_content(question: str, num_images: int) -> list[dict[str, Any]]:
    """The user message's content items: the images at the question's ``<image>`` markers, or
    before its text when it has none."""
    if num_images == 0:
        return [{"type": "text", "text": question}]
    pieces = question.split(IMAGE_MARKER)
    if len(pieces) == 1:
        return [*({"type": "image"} for _ in range(num_images)), {"type": "text", "text": question}]
    items: list[dict[str, Any]] = []
    for k, piece in enumerate(pieces):
        if k:
            items.append({"type": "image"})
        if piece:
            items.append({"type": "text", "text": piece})
    return items


# ---------------------------------------------------------------------------- the processor


class VisionProcessor:
    """The model's image processor and its placeholder tokens.

    Args:
        image_processor: a Hugging Face Qwen2-VL-style image processor (``merge_size``; returns
            ``pixel_values`` and ``image_grid_thw``).
        tokenizer: the model's tokenizer, holding ``<|vision_start|>``, ``<|image_pad|>`` and
            ``<|vision_end|>`` as single tokens.
        cache_size: processed images kept by their bytes' digest (a chain's screenshots recur
            across its group's chains).
    """

    def __init__(self, image_processor: Any, tokenizer: Any, cache_size: int = 256) -> None:
        self.image_processor = image_processor
        self.merge = int(getattr(image_processor, "merge_size", 2))
        ids = {t: tokenizer.convert_tokens_to_ids(t) for t in (VISION_START, IMAGE_PAD, VISION_END)}
        unk = getattr(tokenizer, "unk_token_id", None)
        missing = [t for t, i in ids.items() if i is None or i == unk]
        if missing:
            raise ImageError(f"the tokenizer has no single token for {', '.join(missing)}: not a vision model's tokenizer")
        self.vision_start_id, self.image_pad_id, self.vision_end_id = (
            ids[VISION_START], ids[IMAGE_PAD], ids[VISION_END]
        )
        video = tokenizer.convert_tokens_to_ids(VIDEO_PAD)
        #: the placeholder ids only the processor may put in a chain (a pad stands for pixels)
        self.placeholder_ids = frozenset({self.image_pad_id} | ({video} if video not in (None, unk) else set()))
        self._cache: OrderedDict[str, ImageInput] = OrderedDict()
        self._cache_size = cache_size

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike[str], tokenizer: Any) -> VisionProcessor:
        """The processor saved with a checkpoint (its ``preprocessor_config.json``), on Pillow
        (the processor's PIL backend: no torchvision needed, and the same pixels everywhere)."""
        from transformers import AutoImageProcessor

        if not (Path(path) / "preprocessor_config.json").is_file():
            raise ImageError(
                f"{path} has no preprocessor_config.json: a vision template needs the model's "
                "image processor saved beside it"
            )
        return cls(AutoImageProcessor.from_pretrained(os.fspath(path), backend="pil"), tokenizer)

    def first_placeholder(self, ids: list[int]) -> int | None:
        """The index of the first image or video pad token in ``ids`` (a model's own output),
        or None."""
        return next((k for k, i in enumerate(ids) if i in self.placeholder_ids), None)

    def process(self, data: bytes, where: str = "an image") -> ImageInput:
        """One image file's bytes → its pixel patches, grid and token count (cached by digest)."""
        key = hashlib.sha256(data).hexdigest()
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        from PIL import Image, UnidentifiedImageError

        try:
            with Image.open(io.BytesIO(data)) as img:
                rgb = img.convert("RGB")
        except (UnidentifiedImageError, OSError, SyntaxError) as e:
            raise ImageError(f"{where}: not a readable image file ({e})") from None
        out = self.image_processor(images=[rgb], return_tensors="pt")
        grid = tuple(int(x) for x in out["image_grid_thw"][0])
        t, h, w = grid
        image = ImageInput(out["pixel_values"].float(), grid, t * h * w // self.merge**2)
        self._cache[key] = image
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return image

    def expand(self, ids: list[int], images: list[ImageInput] | tuple[ImageInput, ...]) -> list[int]:
        """``ids`` with the k-th single image pad widened to image k's ``num_tokens`` pads.

        Raises:
            ImageError: the ids hold a different number of pads than there are images.
        """
        pads = sum(1 for i in ids if i == self.image_pad_id)
        if pads != len(images):
            raise ImageError(f"the rendered text holds {pads} image placeholders for {len(images)} images")
        out: list[int] = []
        k = 0
        for i in ids:
            if i == self.image_pad_id:
                out.extend([i] * images[k].num_tokens)
                k += 1
            else:
                out.append(i)
        return out

    def count_tokens(self, ids: list[int]) -> int:
        """Image pad tokens in ``ids``."""
        return sum(1 for i in ids if i == self.image_pad_id)
