"""Prompts are measured against the context when the data is loaded, as the agent loop renders
them: too long a prompt is dropped and named, cut, or stops the run; a chain whose prompt leaves
no room never generates and carries no long prompt into a batch."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest

from agentfly.rollout.agent_loop import AgentLoop
from agentfly.rollout.agents import get_agent
from agentfly.rollout.collate import collate_trajectories
from agentfly.rollout.data import DataError
from agentfly.rollout.datamodule import RolloutDataModule
from agentfly.rollout.prompt_fit import PromptRenderer
from agentfly.rollout.templates import get_template

CONTEXT = 80  # the max_model_len
HEAD, TAIL = "START of the question ", " END of the question?"
LONG = HEAD + "word " * 20_000 + TAIL  # 100k characters
SHORT = [{"question": f"What is {i}+1?", "answer": str(i + 1)} for i in range(3)]


@pytest.fixture
def renderer(tiny_tokenizer) -> PromptRenderer:
    # no tools in the template: with the tiny tokenizer a tool schema alone passes 80 tokens
    agent = get_agent("hermes", [], "Be brief.")
    return PromptRenderer(agent, get_template("qwen2.5"), tiny_tokenizer, CONTEXT)


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def data_module(renderer, train: str, val: str | None = None, **kw) -> RolloutDataModule:
    session = SimpleNamespace(loop=None, close=lambda: None)
    return RolloutDataModule(
        lambda: session, train_files=[train], val_files=[val] if val else [], train_batch_size=2,
        renderer_factory=lambda: renderer, **kw,
    )


def test_an_overlong_row_is_dropped_counted_and_named(renderer, tmp_path, caplog):
    train = write_jsonl(tmp_path / "train.jsonl", [*SHORT[:2], {"question": LONG, "answer": "1"}, SHORT[2]])
    val = write_jsonl(tmp_path / "val.jsonl", [{"question": LONG, "answer": "1"}, SHORT[0]])
    dm = data_module(renderer, train, val)
    with caplog.at_level(logging.WARNING):
        dm.setup("fit")
    assert dm.train_rows == SHORT  # the long row (row 3, from 1) is gone, the others kept in order
    assert dm.val_rows == SHORT[:1]
    assert dm.prompt_counts["data/train_prompts_dropped"] == 1
    assert dm.prompt_counts["data/val_prompts_dropped"] == 1
    said = caplog.text
    assert f"{train} row 3 (" in said and f"{tmp_path / 'val.jsonl'} row 1 (" in said  # rows from 1
    # the length named is the rendered prompt's: far above the context, at least one per word
    named = int(said.split(f"{train} row 3 (")[1].split(" tokens")[0])
    assert named > 20_000


def test_truncation_error_names_the_file_the_row_and_the_length(renderer, tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", [*SHORT, {"question": LONG, "answer": "1"}])
    dm = data_module(renderer, train, filter_overlong_prompts=False, truncation="error")
    with pytest.raises(DataError) as err:
        dm.setup("fit")
    message = str(err.value)
    assert f"{train}: row 4:" in message and "tokens, longer than data.max_prompt_length=79" in message


@pytest.mark.parametrize(("side", "kept_head", "kept_tail"), [
    ("left", False, True), ("right", True, False), ("middle", True, True),
])
def test_truncation_cuts_the_question_until_the_prompt_fits(renderer, tmp_path, side, kept_head, kept_tail):
    train = write_jsonl(tmp_path / "train.jsonl", [*SHORT, {"question": LONG, "answer": "7"}])
    dm = data_module(renderer, train, filter_overlong_prompts=False, truncation=side)
    dm.setup("fit")
    assert dm.train_rows[:3] == SHORT
    cut = dm.train_rows[3]
    assert cut["answer"] == "7" and len(cut["question"]) < len(LONG)
    (length,) = renderer.lengths([cut["question"]])
    assert length <= CONTEXT - 1  # room for one generated token
    assert cut["question"].startswith(HEAD) == kept_head
    assert cut["question"].endswith(TAIL) == kept_tail
    assert dm.prompt_counts["data/train_prompts_truncated"] == 1


def test_a_split_with_every_row_too_long_stops(renderer, tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", [{"question": LONG, "answer": "1"}] * 2)
    with pytest.raises(DataError, match="every one of the 2 train rows"):
        data_module(renderer, train).setup("fit")


def test_a_batch_larger_than_the_rows_left_names_both_numbers(renderer, tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", [SHORT[0], {"question": LONG, "answer": "1"}])
    with pytest.raises(DataError) as err:
        data_module(renderer, train).setup("fit")  # 2 prompts per batch, 1 row left
    assert "data.train_batch_size=2" in str(err.value) and "the 1 training rows" in str(err.value)


def test_max_prompt_length_sets_the_limit(renderer, tmp_path):
    lengths = renderer.lengths([r["question"] for r in SHORT])
    assert len(set(lengths)) == 1
    train = write_jsonl(tmp_path / "train.jsonl", SHORT)
    dm = data_module(renderer, train, max_prompt_length=lengths[0])
    dm.setup("fit")
    assert dm.train_rows == SHORT  # a prompt of exactly the limit fits
    with pytest.raises(DataError, match="every one of the 3"):
        data_module(renderer, train, max_prompt_length=lengths[0] - 1).setup("fit")
    with pytest.raises(ValueError, match="leaves no room"):
        data_module(renderer, train, max_prompt_length=CONTEXT).setup("fit")


class NoEngine:
    """An engine that must never be asked."""

    calls = 0

    async def generate(self, prompts, sampling):
        NoEngine.calls += 1
        raise AssertionError("a prompt that leaves no room was sent to the engine")


def loop_of(tokenizer, engine, context=CONTEXT) -> AgentLoop:
    return AgentLoop(
        engine=engine, tokenizer=tokenizer, template=get_template("qwen2.5"),
        agent=get_agent("hermes", [], "Be brief."), max_model_len=context, max_tokens=8,
    )


def test_a_chain_whose_prompt_leaves_no_room_never_generates(tiny_tokenizer, renderer):
    loop = loop_of(tiny_tokenizer, NoEngine())
    rows = [{"question": LONG, "answer": "1"}]
    (traj,) = asyncio.run(loop.arun(rows))
    assert NoEngine.calls == 0
    assert traj.finish_reason == "prompt_too_long" and "prompt_too_long" in traj.error
    assert traj.response_ids == [] and traj.reward is None
    batch = collate_trajectories([traj], pad_id=0)
    assert batch.input_ids.shape[1] <= CONTEXT  # not a 20k-token row in the update batch
    assert batch.response_mask.sum() == 0  # nothing of it is trained on


def test_the_loop_renders_the_prompt_the_data_module_measured(tiny_tokenizer, renderer):
    """One rendering for both: the measured length is the chain's prompt length, exactly."""

    class Answer:
        async def generate(self, prompts, sampling):
            ids = tiny_tokenizer.encode("<answer>2</answer><|im_end|>", add_special_tokens=False)
            return [[SimpleNamespace(token_ids=ids, logprobs=[0.0] * len(ids), finish_reason="stop")]]

    loop = loop_of(tiny_tokenizer, Answer(), context=4096)
    (traj,) = asyncio.run(loop.arun(SHORT[:1]))
    assert renderer.lengths([SHORT[0]["question"]]) == [len(traj.prompt_ids)]
    # the boundary: a context of exactly the prompt's length leaves no room, one more does
    (edge,) = asyncio.run(loop_of(tiny_tokenizer, NoEngine(), len(traj.prompt_ids)).arun(SHORT[:1]))
    assert edge.finish_reason == "prompt_too_long"
    (fits,) = asyncio.run(loop_of(tiny_tokenizer, Answer(), len(traj.prompt_ids) + 1).arun(SHORT[:1]))
    assert fits.finish_reason != "prompt_too_long" and fits.response_ids


def test_without_a_context_in_the_config_the_session_s_loop_measures(tiny_tokenizer, tmp_path):
    """max_model_len unset: prompts are measured once the engine reports its context."""
    train = write_jsonl(tmp_path / "train.jsonl", [*SHORT, {"question": LONG, "answer": "1"}])
    session = SimpleNamespace(loop=loop_of(tiny_tokenizer, NoEngine()), close=lambda: None)
    dm = RolloutDataModule(lambda: session, train_files=[train], train_batch_size=2)
    dm.setup("fit")
    assert dm.train_rows == SHORT and dm.prompt_counts["data/train_prompts_dropped"] == 1
