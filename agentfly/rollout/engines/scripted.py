"""A model-free engine that replays scripted assistant turns.

For tests and for debugging tools, rewards and templates without a model: turn ``k`` of every
chain (counted from the assistant generation prompts in the prompt text) is ``script[k]``
followed by ``end_of_turn``, tokenized with the model's tokenizer. Log-probabilities are a fixed
``logprob`` per token. It is registered as ``scripted``. ``delay_s`` makes every ``generate``
wait before it answers: a slow or hung engine, for tests of the pool's deadlines.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

from agentfly.rollout.engines.base import (
    Engine,
    GenerationOutput,
    SamplingParams,
    per_prompt,
    register_engine,
)


@register_engine("scripted")
class ScriptedEngine(Engine):
    """Replays ``script`` turn by turn.

    Args:
        model: a directory holding the tokenizer.
        script: the assistant turns' texts, in order; the last repeats once exhausted.
        end_of_turn: appended to every turn (sampled like a stop token).
        turn_marker: the text that opens an assistant turn in the rendered prompt.
        logprob: the log-probability reported for every token.
        max_model_len: as for other engines.
        delay_s: seconds every ``generate`` call waits before it answers.
    """

    def __init__(
        self,
        model: str | os.PathLike[str],
        *,
        script: list[str],
        end_of_turn: str = "<|im_end|>",
        turn_marker: str = "<|im_start|>assistant",
        logprob: float = -1.0,
        max_model_len: int = 4096,
        delay_s: float = 0.0,
        **_: Any,
    ) -> None:
        from transformers import PreTrainedTokenizerFast

        if not script:
            raise ValueError("ScriptedEngine needs at least one scripted turn")
        self._tokenizer = PreTrainedTokenizerFast.from_pretrained(os.fspath(model))
        self.script = list(script)
        self.end_of_turn = end_of_turn
        self.turn_marker = turn_marker
        self.logprob = logprob
        self.max_model_len = max_model_len
        self.delay_s = delay_s

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    def generate(
        self, prompts: list[list[int]], sampling: SamplingParams | Sequence[SamplingParams]
    ) -> list[list[GenerationOutput]]:
        if self.delay_s:
            time.sleep(self.delay_s)
        outputs = []
        for prompt, sp in zip(prompts, per_prompt(prompts, sampling), strict=True):
            text = self._tokenizer.decode(prompt, skip_special_tokens=False)
            turn = max(text.count(self.turn_marker) - 1, 0)
            reply = self.turn_text(turn) + self.end_of_turn
            ids = self._tokenizer.encode(reply, add_special_tokens=False)
            finish = "stop"
            if len(ids) > sp.max_tokens:
                ids, finish = ids[: sp.max_tokens], "length"
            out = GenerationOutput(ids, [self.logprob] * len(ids), finish)
            outputs.append([out] * sp.n)
        return outputs

    def turn_text(self, turn: int) -> str:
        """The text of a chain's assistant turn ``turn`` (from 0): ``script[turn]``, the last
        once exhausted. A subclass may vary it by call (a test's random draw)."""
        return self.script[min(turn, len(self.script) - 1)]

    def load_weights(self, weights: Any) -> None:
        """A script has no weights."""
