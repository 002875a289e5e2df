"""What the SFT tests share: a tokenizer whose tokens are characters (token positions are character
offsets, derived by hand), a chat template of short markers, and conversations."""

from __future__ import annotations

import json

from agentfly.rollout.agents import get_agent
from agentfly.rollout.templates import FormatTemplate
from agentfly.rollout.tools import get_tool
from agentfly.sft.conversations import ConversationRenderer


class CharTokenizer:
    """One token per character, its code point."""

    pad_token_id = 0
    eos_token_id = 0

    def encode(self, text, add_special_tokens=False):
        return [ord(c) for c in text]

    def decode(self, ids, skip_special_tokens=False):
        return "".join(map(chr, ids))

    def __len__(self):
        return 0x110000


#: user turn "U:...\n", assistant turn "A:...|\n", one observation turn "O:...\n" (results joined by ";")
HAND_TEMPLATE = FormatTemplate(
    name="hand", system_template="S:{system}\n", user_template="U:{content}\n", generation_prompt="A:",
    end_of_turn_marker="|", turn_suffix="\n", observations_template="O:{observations}\n",
    observation_template="{observation}", observation_separator=";",
)


def hand_renderer(agent="hermes", tools=("calculator", "answer")) -> ConversationRenderer:
    return ConversationRenderer(get_agent(agent, [get_tool(t) for t in tools]), HAND_TEMPLATE, CharTokenizer())


def structured(name, **arguments):
    """An OpenAI-style tool call (the arguments a JSON string)."""
    return {"type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def solved(question="2+3?", expression="2+3", result="5"):
    """A conversation: the question, a calculator call, its result, an answer call."""
    return [
        {"role": "user", "content": question},
        {"role": "assistant", "content": "", "tool_calls": [structured("calculator", expression=expression)]},
        {"role": "tool", "content": result},
        {"role": "assistant", "content": "", "tool_calls": [structured("answer", answer=result)]},
    ]
