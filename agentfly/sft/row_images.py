"""The images of a conversation row: where a row gives them, and each one read and processed.

A user or tool message's content may be a list of parts; an image part is
``{"type": "image", "image": <source>}`` or OpenAI's ``{"type": "image_url", "image_url": {"url":
<source>}}``, the source a path (relative to the data file), ``{"path": ...}``,
``{"bytes": <base64>}`` or a ``data:image/...;base64,`` URI. An image part without a source takes
the next image of the row's ``images`` list (verl's and the agent loop's field), in the order the
parts appear in the conversation; the row must give exactly one for each such part. Sources are
read with :mod:`agentfly.rollout.vision`'s readers and processed by the model's own image
processor (:class:`~agentfly.rollout.vision.VisionProcessor`), once, when the data is loaded.

An image that cannot be had is the row's problem (a :class:`~agentfly.sft.conversations.BadRow`
naming the message, the part and the source; the reader adds the file and the row). Images in a
system or assistant message are refused: no Qwen-VL template shows them, and an assistant turn
is what the model samples, text only.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentfly.rollout.templates.format import IMAGE_PART_TYPES as IMAGE_PARTS
from agentfly.rollout.vision import ImageError, image_bytes, local_image

if TYPE_CHECKING:
    from agentfly.core.images import ImageInput
    from agentfly.rollout.vision import VisionProcessor


class RowImageError(ValueError):
    """An image of a row that cannot be had (converted to a bad row by the renderer)."""


def is_image_part(part: Any) -> bool:
    return isinstance(part, dict) and part.get("type") in IMAGE_PARTS


def part_source(part: dict[str, Any]) -> Any:
    """The source an image part names (None: the row's ``images`` list gives it)."""
    if part["type"] == "image_url":
        url = part.get("image_url")
        return url.get("url") if isinstance(url, dict) else url
    return part.get("image")


def image_parts(messages: list[dict[str, Any]]) -> Iterator[tuple[int, int, dict[str, Any]]]:
    """``(message, part, the part)`` of every image part, in conversation order."""
    for i, m in enumerate(messages):
        if isinstance(m["content"], list):
            for j, part in enumerate(m["content"]):
                if is_image_part(part):
                    yield i, j, part


def sources(messages: list[dict[str, Any]], row_images: Any) -> dict[tuple[int, int], tuple[Any, str]]:
    """Each image part's ``(source, where)``, by ``(message, part)``: its own, else the next of
    ``row_images``.

    Raises:
        RowImageError: ``row_images`` not a list, or not one per image part without a source.
    """
    if row_images is not None and not isinstance(row_images, list):
        raise RowImageError(f"'images' must be a list, got {type(row_images).__name__}")
    given = list(row_images or [])
    out: dict[tuple[int, int], tuple[Any, str]] = {}
    taken = 0
    for i, j, part in image_parts(messages):
        where = f"messages[{i}].content[{j}]"
        source = part_source(part)
        if source is None:
            if taken < len(given):
                source, where = given[taken], f"{where} (images[{taken}])"
            taken += 1
        out[(i, j)] = (source, where)
    if taken != len(given):
        raise RowImageError(
            f"{taken} image part(s) take their image from the row's 'images', which holds {len(given)}"
        )
    return out


def read_source(source: Any, base_dir: Path, where: str) -> bytes:
    """The bytes of the image ``source`` names (a relative path starts at ``base_dir``).

    Raises:
        RowImageError: a missing file, a remote URL, bytes that cannot be decoded.
    """
    if isinstance(source, dict) and "path" in source:
        source = source["path"]
    if isinstance(source, str) and source.startswith(("http://", "https://")):
        raise RowImageError(f"{where}: image {source!r} is a remote URL; download it and give its path")
    if isinstance(source, str) and not source.startswith("data:"):
        source = source.removeprefix("file://")
        path = local_image(source, base_dir)
        if not path.is_file():
            raise RowImageError(f"{where}: image {source!r} does not exist (looked for {path})")
        source = str(path)
    try:
        return image_bytes(source, f"{where}: image")
    except ImageError as e:
        raise RowImageError(str(e)) from None


def load_images(
    messages: list[dict[str, Any]], row_images: Any, base_dir: Path, vision: VisionProcessor
) -> dict[int, list[ImageInput]]:
    """Every image of the conversation, processed, by message (in part order); each image part
    left as a bare ``{"type": "image"}`` (what a vision template renders as one placeholder).

    Raises:
        RowImageError: an image that cannot be read or processed, naming it.
    """
    found = sources(messages, row_images)
    out: dict[int, list[ImageInput]] = {}
    for (i, j), (source, where) in found.items():
        data = read_source(source, base_dir, where)
        try:
            image = vision.process(data, f"{where}: image")
        except ImageError as e:
            raise RowImageError(str(e)) from None
        out.setdefault(i, []).append(image)
        messages[i]["content"][j] = {"type": "image"}
    return out
