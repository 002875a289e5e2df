"""``agentfly sft`` on a vision-language model (the tiny Qwen2.5-VL): conversations whose user and
tool messages hold images.

Hand facts: Qwen2-VL's processor cuts an image into 14-pixel patches and merges 2 × 2 of them
into one token, so a 112 × 112 screen is an 8 × 8 patch grid, 64 / 4 = 16 image tokens, and an
84 × 84 one 6 × 6, 36 / 4 = 9. The template writes each image as one
``<|vision_start|><|image_pad|><|vision_end|>``; the ids hold the pad widened to those counts, and
the images sit in user and tool turns: never trained on (loss mask 0).
"""

from __future__ import annotations

import base64
import csv
import dataclasses
import json
import re
from pathlib import Path

import pytest
import torch

from agentfly.core.images import ImageInput
from agentfly.rollout.agents import get_agent
from agentfly.rollout.collate import collate_trajectories
from agentfly.rollout.data import DataError
from agentfly.rollout.templates import get_template
from agentfly.rollout.tools import get_tool
from agentfly.rollout.vision import VisionProcessor
from agentfly.sft.conversations import ConversationRenderer
from agentfly.sft.examples import ExampleMaker, load_sft_data
from tests.images import png
from tests.sft.conversations import structured

PAD, START, END = "<|image_pad|>", "<|vision_start|>", "<|vision_end|>"


def data_uri(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()


def rows() -> list[dict]:
    """Two GUI conversations: an image part with its own path; row-level ``images`` taken by
    bare parts, one of them in a tool result (an 84-pixel screenshot)."""
    return [
        {"messages": [
            {"role": "user", "content": [
                {"type": "image", "image": "screens/start.png"}, {"type": "text", "text": "Click OK"},
            ]},
            {"role": "assistant", "content": "", "tool_calls": [structured("answer", answer="ok")]},
        ]},
        {"images": ["screens/form.png", data_uri(png((10, 120, 200), 84))], "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Fill "}, {"type": "image"}]},
            {"role": "assistant", "content": "", "tool_calls": [structured("calculator", expression="2+3")]},
            {"role": "tool", "content": [{"type": "text", "text": "5"}, {"type": "image"}]},
            {"role": "assistant", "content": "", "tool_calls": [structured("answer", answer="5")]},
        ]},
    ]


@pytest.fixture(scope="module")
def vl_dir(tmp_path_factory) -> Path:
    from agentfly.models.tiny_vl import build_tiny_vl_model

    return build_tiny_vl_model(tmp_path_factory.mktemp("tiny_vl"))


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """``rows.jsonl`` and its screens, relative paths beside it."""
    root = tmp_path_factory.mktemp("gui_data")
    (root / "screens").mkdir()
    (root / "screens" / "start.png").write_bytes(png((200, 30, 30)))
    (root / "screens" / "form.png").write_bytes(png((30, 200, 30)))
    (root / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows()))
    return root / "rows.jsonl"


@pytest.fixture(scope="module")
def renderer(vl_dir) -> ConversationRenderer:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(vl_dir)
    agent = get_agent("hermes", [get_tool("calculator"), get_tool("answer")])
    vision = VisionProcessor.from_pretrained(vl_dir, tokenizer)
    return ConversationRenderer(agent, get_template("qwen2.5-vl", tokenizer), tokenizer, vision)


@pytest.fixture(scope="module")
def examples(renderer, data):
    return load_sft_data([str(data)], [], ExampleMaker(renderer), bad_rows="error").train.kept


def test_image_pads_are_the_processors_count_and_never_trained(renderer, examples, data):
    first, second = examples
    assert [im.num_tokens for im in first.images] == [16]
    assert [im.num_tokens for im in second.images] == [16, 9]  # the row's 112 px, the tool's 84 px
    vision, tok = renderer.vision, renderer.tokenizer
    assert vision.count_tokens(first.prompt_ids) == 16 and vision.count_tokens(first.response_ids) == 0
    assert vision.count_tokens(second.prompt_ids) == 16 and vision.count_tokens(second.response_ids) == 9
    for traj in examples:  # every image token is in a user or tool turn: loss mask 0
        masked = [m for i, m in zip(traj.response_ids, traj.loss_mask, strict=True) if i == vision.image_pad_id]
        assert masked == [0] * len(masked)
        assert any(traj.loss_mask)
    # token-exact: the template's text, each single pad widened, and the loop's layout for a tool image
    prompt = tok.decode(first.prompt_ids, skip_special_tokens=False)
    assert prompt.endswith(f"<|im_start|>user\n{START}{PAD * 16}{END}Click OK<|im_end|>\n<|im_start|>assistant\n")
    assert tok.decode(second.prompt_ids, skip_special_tokens=False).count(f"Fill {START}{PAD * 16}{END}<|im_end|>") == 1
    between = tok.decode(second.response_ids, skip_special_tokens=False)
    assert f"<|im_start|>tool\n{START}{PAD * 9}{END}5<|im_end|>" in between  # a tool's image before its text
    # the images are the processor's own pixels of the files
    own = vision.process((data.parent / "screens" / "start.png").read_bytes())
    assert first.images[0].digest == own.digest


def test_the_batch_keeps_each_rows_images_when_split(examples, renderer):
    batch = collate_trajectories(examples, renderer.tokenizer.pad_token_id)
    assert [tuple(im.digest for im in row) for row in batch.images] == [
        tuple(im.digest for im in t.images) for t in examples
    ]
    halves = batch.split(1)
    assert [h.images for h in halves] == [[batch.images[0]], [batch.images[1]]]


def bad_file(tmp_path: Path, row: dict) -> Path:
    """A good row (its screen beside the file), then ``row``."""
    (tmp_path / "screens").mkdir(exist_ok=True)
    (tmp_path / "screens" / "start.png").write_bytes(png((200, 30, 30)))
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(rows()[0]) + "\n" + json.dumps(row) + "\n")
    return path


def test_a_missing_image_is_named_by_file_row_and_image(renderer, tmp_path):
    make = ExampleMaker(renderer)
    own = rows()[0]
    own["messages"][0]["content"][0]["image"] = "nope.png"
    path = bad_file(tmp_path, own)
    with pytest.raises(DataError, match=rf"{path}:2: messages\[0\]\.content\[0\]: image 'nope.png' does not exist"):
        load_sft_data([str(path)], [], make, bad_rows="error")
    listed = rows()[1]
    listed["images"][0] = "screens/gone.png"
    path = bad_file(tmp_path, listed)
    with pytest.raises(DataError, match=r"bad.jsonl:2: messages\[0\]\.content\[1\] \(images\[0\]\): image 'screens/gone.png'"):
        load_sft_data([str(path)], [], make, bad_rows="error")
    (tmp_path / "broken.png").write_bytes(b"\x89PNG broken")
    own["messages"][0]["content"][0] = {"type": "image_url", "image_url": {"url": "broken.png"}}
    path = bad_file(tmp_path, own)
    with pytest.raises(DataError, match=r"bad.jsonl:2: messages\[0\]\.content\[0\]: image: not a readable image"):
        load_sft_data([str(path)], [], make, bad_rows="error")
    # skipped with data.bad_rows=skip, the good row kept
    data = load_sft_data([str(path)], [], make, bad_rows="skip")
    assert len(data.train.kept) == 1 and len(data.train.bad) == 1
    too_few = rows()[1]
    too_few["images"] = too_few["images"][:1]
    with pytest.raises(DataError, match=re.escape("2 image part(s) take their image from the row's 'images', which holds 1")):
        load_sft_data([str(bad_file(tmp_path, too_few))], [], make, bad_rows="error")


def test_a_text_model_refuses_image_rows(tiny_model_dir, tiny_tokenizer, data):
    agent = get_agent("hermes", [get_tool("calculator"), get_tool("answer")])
    text = ConversationRenderer(agent, get_template("qwen2.5-vl"), tiny_tokenizer)  # no image processor
    with pytest.raises(DataError, match=r"rows.jsonl:1: .*the model is a text model"):
        load_sft_data([str(data)], [], ExampleMaker(text), bad_rows="skip")  # not skipped: the run's fault


@pytest.fixture(scope="module")
def module(vl_dir):
    from agentfly.modules.settings import ModelSettings, UpdateSettings
    from agentfly.modules.sft_module import AgentSFTModule

    module = AgentSFTModule(ModelSettings(str(vl_dir)), update=UpdateSettings("actor", mini_batch_size=2))
    module.configure_model()
    return module


def test_the_loss_reads_the_stored_pixels(module, examples, renderer):
    batch = collate_trajectories(examples, renderer.tokenizer.pad_token_id)
    mask = batch.response_mask
    with torch.no_grad():
        before = module.token_log_probs(batch)  # (B, T)
        stored = batch.images[1][1]  # the tool's screenshot
        pixels = stored.pixel_values.clone()
        pixels[0, 0] += 0.5  # one value of one patch
        changed = dataclasses.replace(batch, images=[batch.images[0], (batch.images[1][0], ImageInput(
            pixels, stored.grid_thw, stored.num_tokens))])
        after = module.token_log_probs(changed)
        # micro-batches of one row: each row's images go with it
        alone = [module.token_log_probs(micro) for micro in batch.split(1)]
    assert ((after[1] - before[1]) * mask[1]).abs().max() > 1e-6  # the changed row's loss moves
    assert torch.equal(after[0] * mask[0], before[0] * mask[0])  # the other row's does not
    for row, logp in enumerate(alone):
        width = int(batch.attention_mask[row, batch.prompt_length:].sum())
        torch.testing.assert_close(logp[0, :width], before[row, :width], atol=1e-5, rtol=1e-5)


def sft_args(vl_dir: Path, data: Path, run: Path) -> list[str]:
    return [
        "sft", f"data.train_files=[{data}]", "data.val_files=[]", "data.max_length=512",
        "data.train_batch_size=2", "agent.init_config.agent_type=hermes",
        "agent.init_config.tools=[calculator,answer]", "agent.init_config.template=qwen2.5-vl",
        f"actor_rollout_ref.model.path={vl_dir}", "actor_rollout_ref.actor.optim.lr=3e-3",
        "trainer.total_training_steps=3", f"trainer.default_local_dir={run}", "trainer.logger=[csv]",
        "trainer.n_gpus_per_node=1",
    ]


def test_packing_is_refused_for_a_vision_model(vl_dir, data, tmp_path, capsys):
    from agentfly.cli import main

    assert main([*sft_args(vl_dir, data, tmp_path / "run"), "actor_rollout_ref.model.use_remove_padding=true"]) == 2
    assert "use_remove_padding=true packs rows without their images" in capsys.readouterr().err


@pytest.mark.slow
def test_agentfly_sft_trains_a_vision_model_end_to_end(vl_dir, data, tmp_path):
    """Both rows in every step (batch 2 of 2 examples): the loss falls at each of 3 steps, and
    the exported model has its image processor beside it (``agentfly fit`` reads it)."""
    from agentfly.cli import main

    run = tmp_path / "run"
    assert main(sft_args(vl_dir, data, run)) == 0
    with (run / "metrics" / "version_0" / "metrics.csv").open() as f:
        losses = [float(r["train/loss"]) for r in csv.DictReader(f) if r.get("train/loss")]
    assert len(losses) == 3 and losses[0] > losses[1] > losses[2], losses
    assert {"model.safetensors", "tokenizer.json", "preprocessor_config.json"} <= {
        p.name for p in (run / "hf_actor").iterdir()
    }
