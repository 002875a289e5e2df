"""A tiny random Qwen2.5-VL for tests and the CPU demo of vision-language agents.

``build_tiny_vl_model(path)`` writes a 2-layer Qwen2.5-VL checkpoint (language model and a
2-block vision tower), the tokenizer of :mod:`agentfly.models.tiny` with Qwen-VL's four vision
tokens added, and the image processor; ``Qwen2_5_VLForConditionalGeneration.from_pretrained``,
``AutoTokenizer.from_pretrained`` and :func:`load_image_processor` load them offline.
Everything is seeded; the weights of one seed are byte-identical from build to build.

The architecture is Qwen2.5-VL's at toy width: multimodal rotary positions (``mrope``, sections
in Qwen's 1:1.5:1.5 ratio), a windowed vision tower whose last block attends to the whole image,
14-pixel patches merged 2 × 2 into one language-model token. The default processor bounds
(``min_pixels`` 56², ``max_pixels`` 112²) turn a 112 × 112 screenshot into an 8 × 8 patch grid,
16 image tokens; a larger screen is scaled down to at most 112² pixels, as Qwen's processor
does with its own bounds.

Departures from the released model, none of which the architecture sees: the tokenizer is the
400-token tiny BPE (digits split), not Qwen's; ``<|video_pad|>`` is a token but no video
processor is saved (agentfly's agents send images only); the image processor is the Pillow one,
so the same pixels come out on machines without torchvision.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from agentfly.models.tiny import build_tokenizer

VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD = (
    "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"
)
VISION_TOKENS = (VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD)

PATCH_SIZE, MERGE_SIZE, TEMPORAL_PATCH_SIZE = 14, 2, 2

# Qwen2-VL / Qwen2.5-VL-Instruct's chat template (the processor's), as shipped with the official
# checkpoints: a default system turn, every message a turn of its own role (a tool result is a
# ``tool`` turn), each image part ``<|vision_start|><|image_pad|><|vision_end|>`` where it stands.
QWEN25_VL_CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
    "{{ message['content'] }}<|im_end|>\n{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_vl_tokenizer(vocab_size: int = 400) -> Any:
    """The tiny BPE tokenizer with the vision tokens added as single special tokens and
    Qwen2.5-VL's chat template (``QWEN25_VL_CHAT_TEMPLATE``).

    Args:
        vocab_size: target vocabulary of the BPE, before the four vision tokens.
    """
    tokenizer = build_tokenizer(vocab_size)
    tokenizer.add_special_tokens(
        {"additional_special_tokens": list(VISION_TOKENS)}, replace_extra_special_tokens=False
    )
    tokenizer.chat_template = QWEN25_VL_CHAT_TEMPLATE
    return tokenizer


def build_image_processor(min_pixels: int = 56 * 56, max_pixels: int = 112 * 112) -> Any:
    """Qwen2-VL's image processor on Pillow (14-pixel patches, 2 × 2 merge, 2 frames a patch).

    Args:
        min_pixels: an image smaller than this is scaled up to it.
        max_pixels: an image larger than this is scaled down to it.
    """
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    return Qwen2VLImageProcessorPil(
        min_pixels=min_pixels,
        max_pixels=max_pixels,
        patch_size=PATCH_SIZE,
        merge_size=MERGE_SIZE,
        temporal_patch_size=TEMPORAL_PATCH_SIZE,
    )


def load_image_processor(path: str | os.PathLike[str]) -> Any:
    """The image processor saved in ``path`` (its ``preprocessor_config.json``), on Pillow
    whatever transformers would pick (torchvision's resize gives other pixels), offline."""
    from transformers import AutoImageProcessor

    return AutoImageProcessor.from_pretrained(os.fspath(path), backend="pil", local_files_only=True)


def mrope_section(head_dim: int) -> list[int]:
    """Rotary frequencies per (time, height, width) axis, in Qwen2.5-VL's 16:24:24 ratio
    (``head_dim // 2`` in all: ``[2, 3, 3]`` for 16, ``[16, 24, 24]`` for 128)."""
    half = head_dim // 2
    t = half // 4
    h = (half - t) // 2
    return [t, h, half - t - h]


def build_tiny_vl_model(
    path: str | os.PathLike[str],
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    head_dim: int = 16,
    intermediate_size: int | None = None,
    vision_depth: int = 2,
    vision_hidden_size: int = 32,
    vision_heads: int = 2,
    vocab_size: int = 400,
    max_position_embeddings: int = 2048,
    min_pixels: int = 56 * 56,
    max_pixels: int = 112 * 112,
    initializer_range: float = 0.02,
    rope_theta: float = 1_000_000.0,
    seed: int = 0,
) -> Path:
    """Save a tiny random Qwen2.5-VL, its tokenizer and its image processor into ``path``.

    Args:
        path: output directory (created if missing).
        hidden_size: language-model width (the vision tower's merger projects to it).
        num_layers: decoder layers.
        num_heads: attention heads.
        num_kv_heads: key/value heads (grouped-query attention when fewer than ``num_heads``).
        head_dim: per-head width; even, its half split over the three rotary axes.
        intermediate_size: MLP width; ``4 * hidden_size`` when None.
        vision_depth: vision blocks; the last attends to the whole image, the others to windows.
        vision_hidden_size: vision tower width.
        vision_heads: vision attention heads.
        vocab_size: BPE target vocabulary; the model's vocabulary is the tokenizer's length.
        max_position_embeddings: longest sequence the config admits.
        min_pixels: the image processor's lower bound on an image's area.
        max_pixels: its upper bound (112² gives at most 64 patches, 16 image tokens).
        initializer_range: std of the random weights.
        rope_theta: the language model's rotary base (Qwen2.5-VL's 1e6 by default).
        seed: weights seed; the same seed gives byte-identical weights.

    Returns:
        ``path`` as a ``Path``.
    """
    import torch
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_vl_tokenizer(vocab_size)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in VISION_TOKENS}
    special_ids = dict(
        bos_token_id=None,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.pad_token_id,
    )
    config = Qwen2_5_VLConfig(
        text_config=dict(
            vocab_size=len(tokenizer),
            hidden_size=hidden_size,
            intermediate_size=intermediate_size or 4 * hidden_size,
            num_hidden_layers=num_layers,
            num_attention_heads=num_heads,
            num_key_value_heads=num_kv_heads,
            head_dim=head_dim,
            max_position_embeddings=max_position_embeddings,
            rope_parameters={
                "rope_type": "default",
                "rope_theta": rope_theta,
                "mrope_section": mrope_section(head_dim),
            },
            initializer_range=initializer_range,
            tie_word_embeddings=True,
            **special_ids,
        ),
        vision_config=dict(
            depth=vision_depth,
            hidden_size=vision_hidden_size,
            intermediate_size=2 * vision_hidden_size,
            num_heads=vision_heads,
            out_hidden_size=hidden_size,
            patch_size=PATCH_SIZE,
            spatial_merge_size=MERGE_SIZE,
            temporal_patch_size=TEMPORAL_PATCH_SIZE,
            window_size=4 * PATCH_SIZE,  # 2 × 2 merged tokens a window
            fullatt_block_indexes=[vision_depth - 1],
            initializer_range=initializer_range,
        ),
        image_token_id=ids[IMAGE_PAD],
        video_token_id=ids[VIDEO_PAD],
        vision_start_token_id=ids[VISION_START],
        vision_end_token_id=ids[VISION_END],
        tie_word_embeddings=True,
        **special_ids,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2_5_VLForConditionalGeneration(config)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    build_image_processor(min_pixels, max_pixels).save_pretrained(out)
    return out
