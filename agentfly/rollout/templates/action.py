"""``action-agent``: AgentFly's template of that name (ChatML, for the ``action`` agent).

As AgentFly writes it: the system and user turns end their text with a newline before
``<|im_end|>``; an observation comes right after the assistant's turn as
``<observation>...</observation>`` with no role of its own, and the next assistant turn follows.
The system prompt describes the actions, so the template shows no tool catalogue. The default
system text (no system prompt given) is Qwen's.
"""

from __future__ import annotations

from agentfly.rollout.templates.format import FormatTemplate
from agentfly.rollout.templates.qwen import QWEN_SYSTEM
from agentfly.rollout.templates.registry import register_template

ACTION_AGENT = register_template(
    "action-agent",
    FormatTemplate(
        name="action-agent",
        system_template="<|im_start|>system\n{system}\n<|im_end|>\n",
        default_system=QWEN_SYSTEM,
        user_template="<|im_start|>user\n{content}\n<|im_end|>\n",
        observations_template="{observations}",
        observation_template="<observation>{observation}</observation>\n",
        observation_separator="",
    ),
)
