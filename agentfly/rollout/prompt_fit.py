"""Every data row's prompt fitted into the context when the data is loaded.

Each row is measured as the agent loop will render it (:mod:`agentfly.rollout.prompt`: the
agent's system prompt, the tools' schemas, the chat template, and a vision row's images as
their placeholder runs), so the length checked when the data is loaded is the length the engine
will be given (give or take the tokens of the question's ``<image>`` markers, counted here).

verl's keys, with one departure: ``data.filter_overlong_prompts`` defaults to True (verl: False).
A prompt longer than ``data.max_prompt_length`` (default: the context less one token, room for
at least one generated token) is then dropped, counted and named once. With filtering off,
``data.truncation`` decides: ``error`` stops naming the file, row and length; ``left``,
``right`` and ``middle`` cut the *question's* tokens (never the system prompt, the tools or the
template, as verl's cut of the whole prompt would) until the rendered prompt fits.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentfly.rollout.data import PROMPT_KEYS, DataError
from agentfly.rollout.prompt import render_text

logger = logging.getLogger(__name__)

TRUNCATIONS = ("error", "left", "right", "middle")
_NAMED = 5  # rows named in a message, the rest counted


@dataclass
class PromptRenderer:
    """What renders a prompt (agent, template, tokenizer) and the context it must fit in.

    Attributes:
        max_model_len: prompt + response tokens at most; None: not known before the engine starts.
        vision: the model's :class:`~agentfly.rollout.vision.VisionProcessor` (a vision-language
            model's): a row's images count their placeholder runs; None for a text model.
    """

    agent: Any
    template: Any
    tokenizer: Any
    max_model_len: int | None
    vision: Any = None

    def image_tokens(self, row: dict[str, Any], where: str) -> int:
        """The tokens a row's images add to its rendered prompt: per image, its pads and the
        vision start and end tokens (0 without images).

        Raises:
            DataError: the row has images and the model is a text model."""
        if not row.get("images"):
            return 0
        if self.vision is None:
            raise DataError(
                f"{where}: the row has images but the model is a text model (no vision config, "
                "no image processor): train a vision-language model on it, or drop its images"
            )
        from agentfly.rollout.vision import row_image_bytes

        return sum(self.vision.process(b, where).num_tokens + 2 for b in row_image_bytes(row, where))

    def lengths(self, questions: Sequence[str]) -> list[int]:
        """Token counts of the rendered prompts of ``questions`` (one batched tokenizer call)."""
        texts = [render_text(self.agent, self.template, q)[2] for q in questions]
        if not texts:
            return []
        # verbose=False: the length is what is measured here; transformers' warning that a text
        # is longer than the model's maximum would only repeat the row this check names
        encoded = self.tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]
        return [len(ids) for ids in encoded]

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False, verbose=False))


def renderer_from_loop(loop: Any) -> PromptRenderer:
    """The agent loop's own renderer and context (after its engine has started)."""
    return PromptRenderer(loop.agent, loop.template, loop.tokenizer, loop.max_model_len, loop.vision)


def renderer_from_plan(plan: Any) -> PromptRenderer:
    """The rollout plan's agent, template and tokenizer, built without an engine.

    The tokenizer is loaded from the engine's model path as the engines load it; the context is
    ``agent.init_config.max_model_len`` (None when unset: the engine reports its own).
    """
    from transformers import AutoTokenizer

    from agentfly.core.plugins import load_plugins
    from agentfly.models.loading import is_vision_model
    from agentfly.rollout.agents import get_agent
    from agentfly.rollout.templates import get_template
    from agentfly.rollout.tools.bind import bind_tools
    from agentfly.rollout.vision import VisionProcessor

    load_plugins(plan.plugins)
    kwargs = plan.engine_kwargs
    tokenizer = AutoTokenizer.from_pretrained(
        str(kwargs.get("tokenizer") or kwargs["model"]),
        trust_remote_code=bool(kwargs.get("trust_remote_code", False)),
    )
    tools = bind_tools(list(plan.tools), dict(plan.tool_config or {}))
    agent = get_agent(plan.agent_type, tools, plan.system_prompt, parser=plan.tool_parser)
    template = get_template(plan.template, tokenizer)
    vision = None
    if is_vision_model(kwargs["model"], bool(kwargs.get("trust_remote_code", False))):
        vision = VisionProcessor.from_pretrained(kwargs["model"], tokenizer)
    return PromptRenderer(agent, template, tokenizer, plan.loop.get("max_model_len"), vision)


@dataclass
class FittedPrompts:
    """The rows whose prompts fit, and what was done to the others.

    Attributes:
        rows: the rows kept, in order (a truncated row carries its cut question).
        dropped: ``(file, row, tokens)`` of each row filtered out.
        truncated: ``(file, row, tokens before the cut)`` of each row whose question was cut.
        seconds: wall time of the check.
    """

    rows: list[dict[str, Any]]
    dropped: list[tuple[str, int, int]] = field(default_factory=list)
    truncated: list[tuple[str, int, int]] = field(default_factory=list)
    seconds: float = 0.0


def prompt_limit(max_prompt_length: int | None, max_model_len: int) -> int:
    """The longest prompt allowed: ``max_prompt_length``, else room for one generated token.

    Raises:
        ValueError: ``max_prompt_length`` leaves no room for a generated token.
    """
    if max_prompt_length is None:
        return max_model_len - 1
    if max_prompt_length >= max_model_len:
        raise ValueError(
            f"data.max_prompt_length={max_prompt_length} leaves no room to generate in the "
            f"engine's context of {max_model_len} tokens; set it below {max_model_len}"
        )
    return max_prompt_length


def _question_key(row: dict[str, Any], prompt_key: str | None) -> str:
    keys = (prompt_key,) if prompt_key else PROMPT_KEYS
    return next(k for k in keys if isinstance(row.get(k), str) and row[k].strip())


def _cut(ids: list[int], keep: int, side: str) -> list[int]:
    """``keep`` of ``ids``: the last (``left`` cuts the start), the first, or both ends."""
    if side == "left":
        return ids[len(ids) - keep :]
    if side == "right":
        return ids[:keep]
    head = (keep + 1) // 2
    return ids[:head] + ids[len(ids) - (keep - head) :]


def truncate_question(
    renderer: PromptRenderer, question: str, length: int, limit: int, side: str
) -> str | None:
    """``question`` cut on ``side`` so that its rendered prompt takes at most ``limit`` tokens.

    Args:
        length: the rendered prompt's length with the whole question.

    Returns:
        The cut question, or None when even an empty question does not fit.
    """
    ids = renderer.encode(question)
    for _ in range(8):  # decoding and re-encoding at the cut can merge a token or two
        keep = len(ids) - (length - limit)
        if keep <= 0:
            return None
        ids = _cut(ids, keep, side)
        question = renderer.tokenizer.decode(ids, skip_special_tokens=False)
        (length,) = renderer.lengths([question])
        if length <= limit:
            return question
        ids = renderer.encode(question)
    return None


def _named(entries: list[tuple[str, int, int]]) -> str:
    said = ", ".join(f"{f} row {i} ({n} tokens)" for f, i, n in entries[:_NAMED])
    more = len(entries) - _NAMED
    return said + (f" and {more} more" if more > 0 else "")


def fit_prompts(
    rows: Sequence[tuple[str, int, dict[str, Any]]],
    renderer: PromptRenderer,
    *,
    limit: int,
    filter_overlong: bool,
    truncation: str,
    prompt_key: str | None,
    split: str = "train",
) -> FittedPrompts:
    """Keep, drop or cut each row so that every rendered prompt fits in ``limit`` tokens.

    Args:
        rows: ``(file, row index in the file, row)``.
        renderer: what renders the prompts.
        limit: the longest prompt allowed (:func:`prompt_limit`).
        filter_overlong: drop a row whose prompt is too long (counted, named once in a warning).
        truncation: with filtering off: ``error``, ``left``, ``right`` or ``middle``.
        prompt_key: the row field holding the question.
        split: ``train`` or ``val``, for the messages.

    Raises:
        DataError: ``truncation=error`` and a prompt is too long (naming the file, the row and
            its length); every row of the split was dropped; a cut cannot make a prompt fit.
    """
    if truncation not in TRUNCATIONS:
        raise ValueError(f"data.truncation={truncation!r} is not one of: {', '.join(TRUNCATIONS)}")
    start = time.perf_counter()
    keys = [_question_key(row, prompt_key) for _, _, row in rows]
    lengths = renderer.lengths([row[k] for (_, _, row), k in zip(rows, keys, strict=True)])
    lengths = [n + renderer.image_tokens(row, f"{f}: row {i}") for (f, i, row), n in zip(rows, lengths, strict=True)]
    over = [(f, i, n) for (f, i, _), n in zip(rows, lengths, strict=True) if n > limit]
    context = f"data.max_prompt_length={limit} (agent.init_config.max_model_len={renderer.max_model_len})"
    out = FittedPrompts(rows=[])
    if over and not filter_overlong and truncation == "error":
        f, i, n = over[0]
        raise DataError(
            f"{f}: row {i}: the rendered prompt is {n} tokens, longer than {context}"
            + (f"; {len(over) - 1} more {split} rows too" if len(over) > 1 else "")
            + ". Set data.filter_overlong_prompts=true to skip such rows, or data.truncation="
            "left|right|middle to cut their questions"
        )
    if over and not filter_overlong:
        (empty,) = renderer.lengths([""])
        if empty > limit:
            raise DataError(
                f"the prompt without its question already takes {empty} tokens (system prompt, "
                f"tools' schemas, template), more than {context}: no cut of the question "
                "can make it fit"
            )
    for (f, i, row), key, n in zip(rows, keys, lengths, strict=True):
        if n <= limit:
            out.rows.append(row)
        elif filter_overlong:
            out.dropped.append((f, i, n))
        else:
            cut = truncate_question(renderer, row[key], n, limit, truncation)
            if cut is None:
                raise DataError(f"{f}: row {i}: no {truncation} cut of the question fits {context}")
            out.rows.append({**row, key: cut})
            out.truncated.append((f, i, n))
    out.seconds = time.perf_counter() - start
    if out.dropped:
        if not out.rows:
            raise DataError(
                f"every one of the {len(rows)} {split} rows has a rendered prompt longer than "
                f"{context} (shortest {min(lengths)} tokens): raise the context or shorten the "
                "questions"
            )
        logger.warning(
            "%s: dropped %d of %d rows whose rendered prompt is longer than %s "
            "(data.filter_overlong_prompts=True): %s",
            split, len(out.dropped), len(rows), context, _named(out.dropped),
        )
    if out.truncated:
        logger.warning(
            "%s: cut the question of %d of %d rows (data.truncation=%s) to fit %s: %s",
            split, len(out.truncated), len(rows), truncation, context, _named(out.truncated),
        )
    logger.info("%s: %d prompts measured in %.2f s", split, len(rows), out.seconds)
    return out
