"""The tiny Qwen2.5-VL (``agentfly/models/tiny_vl.py``): it reloads offline with the stock
transformers classes, a 112 × 112 screenshot is 16 image tokens, the logits see the pixels, the
positions the engines pass explicitly are the model's own, and a build is a function of its seed.

About 10 s on 2 CPUs, most of it importing transformers.
"""

from __future__ import annotations

import hashlib
import logging

import pytest
import torch
from PIL import Image

from agentfly.models.tiny_vl import (
    IMAGE_PAD,
    VISION_END,
    VISION_START,
    build_tiny_vl_model,
    load_image_processor,
)
from agentfly.rollout.templates import get_template

IMG = VISION_START + IMAGE_PAD + VISION_END


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return build_tiny_vl_model(tmp_path_factory.mktemp("tiny_vl") / "ckpt")


@pytest.fixture(scope="module")
def loaded(checkpoint):
    """(model, tokenizer, image processor), loaded offline; no warning is logged."""
    from transformers import AutoTokenizer, Qwen2_5_VLForConditionalGeneration

    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append
    logger = logging.getLogger("transformers")
    logger.addHandler(handler)
    try:
        model = Qwen2_5_VLForConditionalGeneration.from_pretrained(
            checkpoint, local_files_only=True
        ).eval()
        tokenizer = AutoTokenizer.from_pretrained(checkpoint, local_files_only=True)
        processor = load_image_processor(checkpoint)
    finally:
        logger.removeHandler(handler)
    assert [r.getMessage() for r in records] == []
    return model, tokenizer, processor


def screen(color=(200, 30, 30)) -> Image.Image:
    """A 112 × 112 screenshot: a plain background and a white 'button'."""
    img = Image.new("RGB", (112, 112), color)
    img.paste((255, 255, 255), (30, 50, 80, 70))
    return img


def encode(loaded, image: Image.Image, question: str = "Click the OK button."):
    """The model's inputs for one user turn holding ``image``: the template's single pad widened
    to the image's token count, as the rollout does."""
    _, tokenizer, processor = loaded
    pixels = processor(images=[image], return_tensors="pt")
    n = int(pixels["image_grid_thw"].prod()) // processor.merge_size**2
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]
    text = get_template("qwen2.5-vl").prompt(messages).replace(IMAGE_PAD, IMAGE_PAD * n)
    input_ids = torch.tensor([tokenizer.encode(text, add_special_tokens=False)])
    return input_ids, pixels["pixel_values"], pixels["image_grid_thw"]


def test_reloads_as_qwen25_vl_with_the_pil_processor(checkpoint, loaded):
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    model, tokenizer, processor = loaded
    assert type(model).__name__ == "Qwen2_5_VLForConditionalGeneration"
    assert isinstance(processor, Qwen2VLImageProcessorPil)
    assert model.config.text_config.rope_parameters["mrope_section"] == [2, 3, 3]
    assert model.config.text_config.vocab_size == len(tokenizer)
    assert model.config.text_config.eos_token_id == tokenizer.convert_tokens_to_ids("<|im_end|>")
    for token, key in [(VISION_START, "vision_start_token_id"), (VISION_END, "vision_end_token_id"),
                       (IMAGE_PAD, "image_token_id"), ("<|video_pad|>", "video_token_id")]:
        assert tokenizer.tokenize(token) == [token]  # one special token
        assert tokenizer.convert_tokens_to_ids(token) == getattr(model.config, key)
        assert token in tokenizer.all_special_tokens


def test_chat_template_is_the_qwen25_vl_template_of_agentfly(loaded):
    """The tokenizer's own template (Qwen2.5-VL's) and agentfly's ``qwen2.5-vl`` render a GUI
    step alike (each tool message alone in its turn, where the two agree)."""
    _, tokenizer, _ = loaded
    messages = [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Click OK."}]},
        {"role": "assistant", "content": "click(40, 60)"},
        {"role": "tool", "content": [{"type": "text", "text": "Done: "}, {"type": "image"}]},
    ]
    own = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert own == get_template("qwen2.5-vl").prompt(messages)
    assert own.count(IMG) == 2


def test_a_112_pixel_screen_is_an_8x8_grid_and_16_tokens(loaded):
    input_ids, pixel_values, grid = encode(loaded, screen())
    assert grid.tolist() == [[1, 8, 8]]
    assert pixel_values.shape == (64, 3 * 2 * 14 * 14)  # (patches, C·T·P·P)
    model = loaded[0]
    assert int((input_ids == model.config.image_token_id).sum()) == 16


def test_logits_depend_on_the_pixels(loaded):
    model = loaded[0]
    before = screen()
    after = screen()
    after.putpixel((5, 5), (0, 0, 0))  # one pixel of the background
    logits = []
    for image in (before, before, after):
        input_ids, pixel_values, grid = encode(loaded, image)
        with torch.no_grad():
            out = model(input_ids=input_ids, pixel_values=pixel_values, image_grid_thw=grid)
        logits.append(out.logits[0, -1])  # (V,)
    assert torch.equal(logits[0], logits[1])
    assert not torch.allclose(logits[0], logits[2], atol=0, rtol=0)


def test_explicit_positions_and_cached_decoding_equal_the_full_forward(loaded):
    """What an engine does: 3D rotary positions from ``get_rope_index``, prefill all but the
    last token, decode it from the cache; the last logits are the full forward's."""
    model = loaded[0]
    input_ids, pixel_values, grid = encode(loaded, screen())
    mask = torch.ones_like(input_ids)
    mm = (input_ids == model.config.image_token_id).int()  # (1, T)
    with torch.no_grad():
        full = model(input_ids=input_ids, attention_mask=mask, pixel_values=pixel_values,
                     image_grid_thw=grid, mm_token_type_ids=mm).logits  # (1, T, V)
        pos, _ = model.model.get_rope_index(input_ids, mm, image_grid_thw=grid,
                                            attention_mask=mask)  # (3, 1, T)
        assert pos.shape == (3, 1, input_ids.shape[1])
        model.model.rope_deltas = None
        prefill = model(input_ids=input_ids[:, :-1], position_ids=pos[:, :, :-1],
                        pixel_values=pixel_values, image_grid_thw=grid, use_cache=True)
        step = model(input_ids=input_ids[:, -1:], position_ids=pos[:, :, -1:],
                     past_key_values=prefill.past_key_values, use_cache=True)
    torch.testing.assert_close(step.logits[0, -1], full[0, -1], atol=1e-5, rtol=1e-5)


def test_build_is_a_function_of_the_seed(checkpoint, tmp_path):
    def digest(path) -> str:
        return hashlib.sha256((path / "model.safetensors").read_bytes()).hexdigest()

    assert digest(build_tiny_vl_model(tmp_path / "same", seed=0)) == digest(checkpoint)
    assert digest(build_tiny_vl_model(tmp_path / "other", seed=1)) != digest(checkpoint)
    for name in ("tokenizer.json", "preprocessor_config.json", "config.json"):
        assert (tmp_path / "same" / name).read_bytes() == (checkpoint / name).read_bytes()
