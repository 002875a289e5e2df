"""The benchmark workloads: one definition, read by every system's worker.

W1 single-turn GRPO on SmolLM2-135M-Instruct, W2 the same with the calculator over up to 3 turns,
W3 W1 on the tiny demo model (560k parameters), where the trainer's own overhead shows, W4 GRPO at
a GPU's scale: a Qwen2.5-1.5B-shaped model with random weights (``bench/make_w4_model.py``), bf16,
64 prompts x 8 chains, up to 1,024 new tokens, one PPO epoch in 4 mini-batches. Every system gets
the same prompts (rendered once by agentfly's template and handed to TRL as text, so the prompt
token ids are identical), group size, token limits, temperature, optimizer (AdamW, same lr /
betas / weight decay, grad clip 1.0), precision (fp32; W4 bf16 mixed: fp32 master weights,
bf16 autocast, the engine in bf16) and device (CPU, or the GPU with ``bench/run.py --device
cuda``). ``<w>-tiny`` workloads (``run.py --tiny``) check a workload's path on the CPU in minutes.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def cache_dir() -> Path:
    return Path(os.environ.get("AGENTFLY_CACHE", Path.home() / ".cache" / "agentfly"))


def smollm2_path() -> str:
    """The converted SmolLM2 folder (``python -m agentfly.models.smollm2`` makes it once)."""
    return str(cache_dir() / "smollm2-135m-instruct")


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
    # optimizer steps per iteration (one PPO epoch over the batch in this many mini-batches)
    mini_batches: int = 1
    precision: str = "fp32"  # or "bf16": fp32 master weights, bf16 autocast, engine in bf16
    # a random-weight model made on the machine (bench/make_w4_model.py): its architecture
    # (a Qwen2Config's keywords); ``model`` is then its folder's name under the agentfly cache
    random_model: dict[str, Any] | None = None
    reward: str = "math_equal_reward"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def samples(self) -> int:
        return self.prompts * self.group

    @property
    def micro(self) -> int:
        return self.micro_batch or self.mini

    @property
    def mini(self) -> int:
        """Rows per optimizer step."""
        return self.samples // self.mini_batches

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

#: Qwen2.5-1.5B's published config (Qwen/Qwen2.5-1.5B config.json), but for the vocabulary:
#: there is no Qwen tokenizer offline, so W4 uses SmolLM2's (49,152 tokens; Qwen's LM head has
#: 151,936 rows, 0.17B parameters more, 12 % of the model)
QWEN25_15B = dict(
    hidden_size=1536,
    intermediate_size=8960,
    num_hidden_layers=28,
    num_attention_heads=12,
    num_key_value_heads=2,
    rope_theta=1_000_000.0,
    tie_word_embeddings=True,
    rms_norm_eps=1e-6,
    max_position_embeddings=32768,
    hidden_act="silu",
    initializer_range=0.02,
)
WORKLOADS["w4"] = Workload(
    name="w4",
    title="W4 GRPO at GPU scale: Qwen2.5-1.5B's architecture, random weights, SmolLM2's "
    "tokenizer (vocab 49,152, not 151,936), bf16",
    model="w4-qwen2.5-1.5b-random",
    random_model=QWEN25_15B,
    # 2,000 arithmetic questions: 64 distinct prompts per iteration (gsm8k_sample has 20)
    data="agentfly/demo/data/train.json",
    template="qwen2.5",
    system_prompt=SMOL_SYSTEM,
    prompts=64,
    group=8,
    max_new_tokens=1024,  # random weights rarely sample EOS: responses run to the limit
    max_model_len=1280,
    mini_batches=4,  # 128 rows per optimizer step
    # ~1,150 tokens a row, no activation checkpointing: about 4 MB of activations a token, so
    # 4 rows a forward/backward (~19 GB) beside fp32 weights, grads and AdamW (~22 GB) on 80 GB
    micro_batch=4,
    precision="bf16",
)
WORKLOADS["w4-tiny"] = replace(
    WORKLOADS["w4"],
    name="w4-tiny",
    title="W4's path on a tiny model (2 layers, hidden 64), for a CPU check",
    model="w4-tiny-random",
    random_model=dict(
        QWEN25_15B,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    ),
    prompts=2,
    group=2,
    max_new_tokens=16,
    max_model_len=256,
    mini_batches=2,
    micro_batch=1,
)


def model_path(w: Workload) -> str:
    if w.random_model is not None:
        return str(cache_dir() / w.model)
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
