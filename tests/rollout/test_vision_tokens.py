"""Images from the engine to the loss, token-exact, on the tiny Qwen2.5-VL model.

Hand facts: Qwen2-VL's processor cuts an image into 14-pixel patches and merges 2 × 2 of them
into one token, so a 112 × 112 screen is an 8 × 8 patch grid, 64 / 4 = 16 image tokens, and an
84 × 84 one 6 × 6, 36 / 4 = 9. The engine samples with log-probabilities log_softmax(logits) of
its own (KV-cached) forward; the trainer recomputes them with one whole forward over the same
ids and the same pixel tensors: equal up to float rounding (≤ 1e-4, measured 5e-7).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import pickle

import pytest
import torch

from agentfly.core.images import ImageInput, ImagePrompt
from agentfly.core.trajectory import Trajectory
from agentfly.models.vision_inputs import vision_response_logits
from agentfly.rollout.agent_loop import AgentLoop
from agentfly.rollout.agents import get_agent
from agentfly.rollout.collate import collate_trajectories
from agentfly.rollout.data import load_rows
from agentfly.rollout.engines.base import GenerationOutput, SamplingParams
from agentfly.rollout.templates import get_template
from agentfly.rollout.tools.base import ToolResult, get_tool, tool
from agentfly.rollout.vision import ImageError, VisionProcessor
from tests.images import png

PROMPT = "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Click the button<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def vl_dir(tmp_path_factory):
    from agentfly.models.tiny_vl import build_tiny_vl_model

    return build_tiny_vl_model(tmp_path_factory.mktemp("tiny_vl"))


@pytest.fixture(scope="module")
def engine(vl_dir):
    from agentfly.rollout.engines.transformers_engine import TransformersEngine

    return TransformersEngine(vl_dir)


@pytest.fixture(scope="module")
def vision(vl_dir, engine):
    return VisionProcessor.from_pretrained(vl_dir, engine.tokenizer)


def trainer_logprobs(model, batch) -> torch.Tensor:
    logits = vision_response_logits(
        model, batch.input_ids, batch.attention_mask, batch.images, batch.response_length
    ).float()
    return torch.log_softmax(logits, -1).gather(-1, batch.responses[..., None])[..., 0]


def test_image_tokens_are_the_processors_count(vision, engine):
    big, small = vision.process(png((200, 30, 30))), vision.process(png((30, 200, 30), 84))
    assert (big.grid_thw, big.num_tokens) == ((1, 8, 8), 16)
    assert (small.grid_thw, small.num_tokens) == ((1, 6, 6), 9)
    ids = vision.expand(engine.tokenizer.encode(PROMPT, add_special_tokens=False), [small])
    assert vision.count_tokens(ids) == 9
    with pytest.raises(ImageError, match="1 image placeholders for 2 images"):
        vision.expand(engine.tokenizer.encode(PROMPT, add_special_tokens=False), [big, small])
    with pytest.raises(ImageError, match="not a readable image"):
        vision.process(b"not a png", "row 3: image 0")


@pytest.fixture(scope="module")
def sampled(engine, vision):
    """Two chains sampled in one engine call, each from its own image (different sizes)."""
    images = [vision.process(png((200, 30, 30))), vision.process(png((30, 200, 30), 84))]
    prompts = [
        ImagePrompt(vision.expand(engine.tokenizer.encode(PROMPT, add_special_tokens=False), [im]), [im])
        for im in images
    ]
    outs = engine.generate(prompts, SamplingParams(temperature=1.0, max_tokens=10, seed=3))
    trajs = []
    for prompt, (out,) in zip(prompts, outs, strict=True):
        traj = Trajectory(prompt_ids=list(prompt), images=list(prompt.images))
        traj.append_sampled(out.token_ids, out.logprobs)
        trajs.append(traj)
    return trajs


def test_engine_and_trainer_logprobs_agree(engine, sampled):
    batch = collate_trajectories(sampled, engine.tokenizer.pad_token_id)
    assert batch.images is not None and [len(r) for r in batch.images] == [1, 1]
    with torch.no_grad():
        trainer = trainer_logprobs(engine.model, batch)
    mask = batch.response_mask
    assert mask.sum() > 0
    assert ((trainer - batch.rollout_log_probs) * mask).abs().max() <= 1e-4
    # rows split apart give the same log-probs (a micro-batch of one row)
    with torch.no_grad():
        alone = trainer_logprobs(engine.model, batch.select(slice(1, 2)))
    width = int(mask[1].sum())
    assert torch.allclose(alone[0, :width], trainer[1, :width], atol=1e-5)


def test_one_pixel_of_the_stored_image_changes_the_logprobs(engine, sampled):
    batch = collate_trajectories(sampled, engine.tokenizer.pad_token_id)
    with torch.no_grad():
        before = trainer_logprobs(engine.model, batch)
        stored = batch.images[0][0]
        pixels = stored.pixel_values.clone()
        pixels[0, 0] += 0.5  # one value of one patch
        changed = ImageInput(pixels, stored.grid_thw, stored.num_tokens)
        assert changed.digest != stored.digest
        after = trainer_logprobs(engine.model, dataclasses.replace(batch, images=[(changed,), batch.images[1]]))
    mask = batch.response_mask
    assert ((after[0] - before[0]) * mask[0]).abs().max() > 1e-6  # the changed row moves
    assert torch.equal(after[1] * mask[1], before[1] * mask[1])  # the other does not


def test_same_ids_different_images_are_not_merged(engine, vision):
    """Two prompts with equal ids but different images are prefilled apart (the engine's
    dedup keys on the images' digests too): greedy continuations come from each image."""
    a, b = vision.process(png((200, 30, 30))), vision.process(png((30, 30, 200)))
    ids = vision.expand(engine.tokenizer.encode(PROMPT, add_special_tokens=False), [a])
    both = engine.generate([ImagePrompt(ids, [a]), ImagePrompt(ids, [b])], SamplingParams(temperature=0, max_tokens=6))
    one_a = engine.generate([ImagePrompt(ids, [a])], SamplingParams(temperature=0, max_tokens=6))
    one_b = engine.generate([ImagePrompt(ids, [b])], SamplingParams(temperature=0, max_tokens=6))
    assert both[0][0].token_ids == one_a[0][0].token_ids
    assert both[1][0].token_ids == one_b[0][0].token_ids
    assert both[0][0].logprobs != both[1][0].logprobs


# ---------------------------------------------------------------- a chain with a screenshot tool

SHOT = png((10, 120, 200), 84)  # the tool's screen: 9 tokens


@tool(name="test_vision_snap", runs_in="thread", timeout=5.0)
def snap() -> ToolResult:
    """Take a screenshot."""
    return ToolResult(observation="the screen now", images=[SHOT])


class ScriptedVisionEngine:
    """Answers turn k with ``turns[k]``; keeps every prompt it was given (ids and images)."""

    def __init__(self, tokenizer, turns: list[str]) -> None:
        self.tokenizer, self.turns, self.prompts = tokenizer, turns, []

    async def generate(self, prompts, sampling):
        self.prompts.append(prompts[0])
        ids = self.tokenizer.encode(self.turns[len(self.prompts) - 1], add_special_tokens=False)
        return [[GenerationOutput(ids, [-0.5] * len(ids), "stop")]]


def test_a_row_image_and_a_tool_screenshot_enter_the_chain_token_exact(tmp_path, engine, vision):
    (tmp_path / "screens").mkdir()
    (tmp_path / "screens" / "0.png").write_bytes(png((200, 30, 30)))
    data = tmp_path / "rows.json"
    data.write_text(json.dumps([{"question": "Look: <image> then snap.", "images": ["screens/0.png"]}]))
    (row,) = load_rows(data)
    assert row["images"] == [str(tmp_path / "screens" / "0.png")]  # resolved beside the data file
    scripted = ScriptedVisionEngine(engine.tokenizer, [
        '<tool_call>\n{"name": "test_vision_snap", "arguments": {}}\n</tool_call><|im_end|>',
        "Done.<|im_end|>",
    ])
    loop = AgentLoop(
        engine=scripted, tokenizer=engine.tokenizer, template=get_template("qwen2.5-vl"),
        agent=get_agent("hermes", [get_tool("test_vision_snap")]), vision=vision, max_turns=3,
    )
    (traj,) = asyncio.run(loop.arun([row]))
    assert traj.error is None and traj.num_turns == 2
    assert [im.num_tokens for im in traj.images] == [16, 9]  # the row's 112 px, the tool's 84 px
    ids = traj.input_ids
    pad = vision.image_pad_id
    assert sum(1 for i in ids if i == pad) == 16 + 9
    assert sum(1 for i in traj.prompt_ids if i == pad) == 16  # the row's image is in the prompt
    # every image token is an observation: mask 0, no log-prob
    for tok, mask, lp in zip(traj.response_ids, traj.loss_mask, traj.rollout_logprobs, strict=True):
        if tok == pad:
            assert (mask, lp) == (0, 0.0)
    # the engine saw the ids and images the trajectory keeps
    first, second = scripted.prompts
    assert isinstance(first, ImagePrompt) and [im.digest for im in first.images] == [traj.images[0].digest]
    assert [im.digest for im in second.images] == [im.digest for im in traj.images]
    assert list(second) == ids[: len(second)]
    # the text the template rendered around the screenshot (qwen2.5-vl: a `tool` turn)
    text = engine.tokenizer.decode(traj.response_ids, skip_special_tokens=False)
    assert "<|im_start|>tool\n<|vision_start|>" + "<|image_pad|>" * 9 + "<|vision_end|>the screen now" in text
    batch = collate_trajectories([traj], engine.tokenizer.pad_token_id)
    assert batch.images == [tuple(traj.images)]


def test_an_image_pad_the_model_writes_ends_the_chain_before_it(tmp_path, engine, vision):
    """A model emitting ``<|image_pad|>`` (garbage from a random or drifting policy) would leave
    more image tokens in the ids than its images stand for, and the trainer's forward would
    refuse the whole batch. The turn is cut before the pad, the chain ends ("image_token"), and
    its ids, images and log-probs still agree."""
    (tmp_path / "s.png").write_bytes(png((200, 30, 30)))
    data = tmp_path / "rows.json"
    data.write_text(json.dumps([{"question": "<image>Click.", "images": ["s.png"]}]))
    (row,) = load_rows(data)
    scripted = ScriptedVisionEngine(engine.tokenizer, ["Action: cl<|image_pad|>ick(5,5)<|im_end|>"])
    loop = AgentLoop(
        engine=scripted, tokenizer=engine.tokenizer, template=get_template("qwen2.5-vl"),
        agent=get_agent("gui", [get_tool("test_vision_snap")]), vision=vision, max_turns=3,
    )
    (traj,) = asyncio.run(loop.arun([row]))
    kept = engine.tokenizer.encode("Action: cl", add_special_tokens=False)
    assert traj.finish_reason == "image_token" and traj.num_turns == 1 and not traj.tool_calls
    assert traj.response_ids == kept and traj.rollout_logprobs == [-0.5] * len(kept)
    assert vision.count_tokens(traj.input_ids) == sum(im.num_tokens for im in traj.images) == 16
    batch = collate_trajectories([traj], engine.tokenizer.pad_token_id)
    with torch.no_grad():
        trainer_logprobs(engine.model, batch)  # the trainer takes the chain


def test_a_missing_image_is_named_by_file_and_row(tmp_path):
    data = tmp_path / "rows.json"
    data.write_text(json.dumps([{"question": "q"}, {"question": "q", "images": ["nope.png"]}]))
    with pytest.raises(ImageError, match=r"rows.json: row 2: image 0 \('nope.png'\) does not exist"):
        load_rows(data)
    (tmp_path / "bad.png").write_bytes(b"\x89PNG broken")
    data.write_text(json.dumps([{"question": "q", "images": ["bad.png"]}]))
    with pytest.raises(ImageError, match="row 1: image 0: not a readable image file"):
        load_rows(data)


def test_image_prompts_pickle_with_their_images(vision):
    im = vision.process(png((1, 2, 3)))
    back = pickle.loads(pickle.dumps(ImagePrompt([1, 2, 3], [im])))
    assert list(back) == [1, 2, 3] and back.images[0].digest == im.digest


def test_the_load_time_length_check_counts_image_tokens(tmp_path, engine, vision):
    from agentfly.rollout.data import DataError
    from agentfly.rollout.prompt_fit import PromptRenderer

    (tmp_path / "a.png").write_bytes(png((1, 2, 3)))
    (tmp_path / "b.png").write_bytes(png((1, 2, 3), 84))
    row = {"question": "q", "images": [str(tmp_path / "a.png"), str(tmp_path / "b.png")]}
    agent, template = get_agent("hermes", []), get_template("qwen2.5-vl")
    # per image: its pads and <|vision_start|>, <|vision_end|>: (16 + 2) + (9 + 2)
    assert PromptRenderer(agent, template, engine.tokenizer, 4096, vision).image_tokens(row, "r") == 29
    with pytest.raises(DataError, match=r"data\.json: row 4: the row has images but the model is a text model"):
        PromptRenderer(agent, template, engine.tokenizer, 4096).image_tokens(row, "data.json: row 4")
