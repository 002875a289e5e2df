"""The benchmark workloads: one definition, read by every system's worker.

W1 single-turn GRPO on SmolLM2-135M-Instruct, W2 the same with the calculator over up to 3 turns,
W3 W1 on the tiny demo model (560k parameters), where the trainer's own overhead shows. Every
system gets the same prompts (rendered once by agentfly's template and handed to TRL as text, so
the prompt token ids are identical), group size, token limits, temperature, optimizer (AdamW,
same lr / betas / weight decay, grad clip 1.0), precision (fp32) and device (CPU, or the GPU
with ``bench/run.py --device cuda``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def smollm2_path() -> str:
    """The converted SmolLM2 folder (``python -m agentfly.models.smollm2`` makes it once)."""
    base = Path(os.environ.get("AGENTFLY_CACHE", Path.home() / ".cache" / "agentfly"))
    return str(base / "smollm2-135m-instruct")


@dataclass(frozen=True)
class Workload:
    name: str
    title: str
    model: str
    data: str
    template: str | None
    system_prompt: str | None
    tools: tuple[str, ...] = ()
    max_turns: int = 1
    prompts: int = 8  # per iteration
    group: int = 4  # generations per prompt
    max_new_tokens: int = 64  # per turn
    max_model_len: int = 512
    temperature: float = 1.0
    lr: float = 1e-6
    # rows per forward/backward pass of the update (None: the whole mini-batch in one pass);
    # the optimizer still steps once per iteration over the whole mini-batch
    micro_batch: int | None = None
    reward: str = "math_equal_reward"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def samples(self) -> int:
        return self.prompts * self.group

    @property
    def micro(self) -> int:
        return self.micro_batch or self.samples

    def rows(self) -> list[dict[str, Any]]:
        return json.loads(Path(REPO / self.data).read_text())


SMOL_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

WORKLOADS: dict[str, Workload] = {
    "w1": Workload(
        name="w1",
        title="W1 single-turn GRPO, SmolLM2-135M-Instruct",
        model="smollm2",
        data="agentfly/data/gsm8k_sample.json",
        template="qwen2.5",
        system_prompt=SMOL_SYSTEM,
    ),
    "w2": Workload(
        name="w2",
        title="W2 multi-turn calculator (<= 3 turns), SmolLM2-135M-Instruct",
        model="smollm2",
        data="agentfly/data/gsm8k_sample.json",
        template="qwen2.5",
        system_prompt=SMOL_SYSTEM,
        tools=("calculator",),
        max_turns=3,
        max_model_len=1024,
        reward="math_equal_reward_tool",
        # the tool catalogue makes prompts ~450 tokens: TRL's update over all 32 rows at once
        # peaked at 20.9 GiB on this 23 GiB machine, so both systems take 4 micro-batches of 8
        micro_batch=8,
    ),
    "w3": Workload(
        name="w3",
        title="W3 framework overhead: W1 on the 560k-parameter demo model",
        model="agentfly/demo/model",
        data="agentfly/demo/data/train.json",
        template="qwen2.5-no-system-tool",
        system_prompt=None,
        max_model_len=256,
        lr=3e-4,
    ),
}


def model_path(w: Workload) -> str:
    return smollm2_path() if w.model == "smollm2" else str(REPO / w.model)


def render_prompts(w: Workload, tokenizer: Any) -> list[str]:
    """Each row's prompt text as agentfly renders it (template, system prompt, tool catalogue)."""
    from agentfly.rollout.agents import get_agent
    from agentfly.rollout.data import question_of
    from agentfly.rollout.templates import get_template
    from agentfly.rollout.tools import get_tool

    agent = get_agent("hf", [get_tool(t) for t in w.tools], w.system_prompt)
    template = get_template(w.template, tokenizer)
    return [
        template.prompt(agent.initial_messages(question_of(row, None, i)), agent.template_tools())
        for i, row in enumerate(w.rows())
    ]


def iteration_rows(w: Workload, k: int) -> list[int]:
    """Row indices of iteration ``k`` (no shuffle: consecutive slices, as ``data.shuffle=false``)."""
    n = len(w.rows())
    per_epoch = n // w.prompts
    step = k % per_epoch
    return list(range(step * w.prompts, (step + 1) * w.prompts))
