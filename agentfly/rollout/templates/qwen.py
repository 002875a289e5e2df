"""Qwen's ChatML family: ``qwen2.5``, ``qwen2.5-no-system-tool``, ``qwen-chat``.

``qwen2.5`` and ``qwen2.5-no-system-tool`` reproduce AgentFly's templates of the same names
(``agentfly/templates/templates.py``), which follow Qwen2.5-Instruct's official chat template:
hermes tool catalogue in the system turn, tool results as a user turn of ``<tool_response>``
blocks. Deviation: consecutive tool results share one user turn, as in Qwen's official template
and AgentFly's newer templates (the older AgentFly template opened one user turn per result; the
text is identical for a single result).

``qwen-chat`` (named in AgentFly's training guide, not defined in its public templates module) is
plain ChatML with Qwen-Chat's default system prompt and no tool markup: the agent describes its
tools and the observations come back as plain user turns.
"""

from __future__ import annotations

from agentfly.rollout.templates.format import FormatTemplate
from agentfly.rollout.templates.registry import register_template

QWEN_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

HERMES_TOOLS = (
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    "{tools}\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)

QWEN25 = register_template(
    "qwen2.5",
    FormatTemplate(name="qwen2.5", default_system=QWEN_SYSTEM, tools_template=HERMES_TOOLS),
)

# Tools are not shown by the template: the agent's own prompt describes them (ReAct, code).
QWEN25_NO_SYSTEM_TOOL = register_template(
    "qwen2.5-no-system-tool",
    FormatTemplate(name="qwen2.5-no-system-tool", default_system=QWEN_SYSTEM),
)

QWEN_CHAT = register_template(
    "qwen-chat",
    FormatTemplate(
        name="qwen-chat",
        default_system="You are a helpful assistant.",
        observations_template="<|im_start|>user\n{observations}<|im_end|>\n",
        observation_template="{observation}",
        observation_separator="\n",
    ),
)
