"""``action-agent``: ChatML for agents that act with ``<action>...</action>`` tags (WebShop-style).

Named in AgentFly's training guide (``agent_type=action``) but not defined in its public
templates module; this definition is ours. The system prompt lists the actions, so the template
shows no tool catalogue; each observation (the environment's page) comes back as a plain user
turn.
"""

from __future__ import annotations

from agentfly.rollout.templates.format import FormatTemplate
from agentfly.rollout.templates.qwen import QWEN_SYSTEM
from agentfly.rollout.templates.registry import register_template

ACTION_AGENT = register_template(
    "action-agent",
    FormatTemplate(
        name="action-agent",
        default_system=QWEN_SYSTEM,
        observations_template="<|im_start|>user\n{observations}<|im_end|>\n",
        observation_template="{observation}",
        observation_separator="\n",
    ),
)
