"""Small PNG screens the vision tests draw."""

from __future__ import annotations

import io


def png(color: tuple[int, int, int], size: int = 112) -> bytes:
    """A ``size`` × ``size`` PNG of ``color`` with a white rectangle (so patches differ)."""
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (size, size), color)
    ImageDraw.Draw(img).rectangle([10, 10, 40, 30], fill=(255, 255, 255))
    out = io.BytesIO()
    img.save(out, format="PNG")
    return out.getvalue()
