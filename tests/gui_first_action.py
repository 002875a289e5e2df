"""A run's plug-in (``agent.init_config.plugins=[tests.gui_first_action]``): the engine
``gui_first_action``, the transformers engine with every chain's first turn set to a readable
GUI action, so that a tiny random Qwen2.5-VL takes a ``gui_step`` and sees a second screenshot.

The first turn is one of :data:`ACTIONS`, chosen by the chain's sampling seed (``seed %
len(ACTIONS)``; the chains of a group have consecutive seeds, so they differ), its log-probs the
model's own (``log_softmax`` of one forward over the prompt, its images and the action, as the
trainer recomputes them); every later turn is sampled as the transformers engine samples it.
"""

from __future__ import annotations

from typing import Any

import torch

from agentfly.core.images import prompt_images
from agentfly.models.vision_inputs import vision_response_logits
from agentfly.rollout.engines.base import GenerationOutput, check_request, register_engine
from agentfly.rollout.engines.transformers_engine import TransformersEngine
from tests.rewards import probe_even_token_share  # noqa: F401  (registers the run's reward)

#: first turns: the digits' token ids differ in parity, so chains score unlike on even ids
ACTIONS = ("click(5,5)", "click(6,6)", "click(5,6)")
TURN_MARKER = "<|im_start|>assistant"


@register_engine("gui_first_action")
class GUIFirstAction(TransformersEngine):
    """The transformers engine, each chain's first turn one of :data:`ACTIONS` (module docstring)."""

    def generate(self, prompts, sampling):
        params = check_request(prompts, sampling, self.max_model_len)
        first = [i for i, p in enumerate(prompts) if self._tokenizer.decode(list(p)).count(TURN_MARKER) == 1]
        rest = [i for i in range(len(prompts)) if i not in first]
        out: list[Any] = [None] * len(prompts)
        if rest:
            for i, sampled in zip(rest, super().generate([prompts[i] for i in rest], [params[i] for i in rest]),
                                  strict=True):
                out[i] = sampled
        for i in first:
            seed = params[i].seed or 0
            out[i] = [self._forced(prompts[i], ACTIONS[(seed + k) % len(ACTIONS)], params[i].temperature)
                      for k in range(params[i].n)]
        return out

    @torch.no_grad()
    def _forced(self, prompt: Any, action: str, temperature: float) -> GenerationOutput:
        ids = self._tokenizer.encode(action + "<|im_end|>", add_special_tokens=False)
        row = torch.tensor([list(prompt) + ids], device=self.device)  # (1, P + T)
        logits = vision_response_logits(
            self.model, row, torch.ones_like(row), [prompt_images(prompt)], len(ids)
        ).float() / (temperature or 1.0)  # (1, T, V); raw logits when greedy, as the engine
        logprobs = logits.log_softmax(-1)[0].gather(-1, row[0, -len(ids):, None])[:, 0]  # (T,)
        return GenerationOutput(ids, logprobs.tolist(), "stop")
