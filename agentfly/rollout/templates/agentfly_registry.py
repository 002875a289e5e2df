"""The templates AgentFly's own registry defines (``src/agentfly/templates/registry.py`` of
github.com/Agent-One-Lab/AgentFly, as of commit 1256586), which its training scripts name:
``search-r1``, ``qwen3-instruct-no-tool``, ``qwen3-think-no-tool``, ``qwen3-think``,
``qwen3-miniswe``, ``qwen-xml``, ``qwen-xml-think`` (``action-agent`` is in ``action.py``).

AgentFly writes them as chat-bricks ``Template``s in the field names of chat-bricks 0.1.3
(``tool_template``, ``system_template_with_tools``; 0.1.5 renamed or removed them), so they are
transcribed with 0.1.3's rendering rules, faithfully, quirks included:

- No default system message: without a system message the system turn renders empty
  (``<|im_start|>system\\n<|im_end|>\\n``); tools are shown only by the templates with a
  ``system_template_with_tools``, and then as the raw catalogue (one JSON object per line).
- Consecutive tool results are written back to back, with nothing between them, inside one
  wrapper (one ``<tool_response>`` block, one ``<information>`` block): chat-bricks 0.1.3
  joins them before applying ``tool_template``.

``qwen3-miniswe`` is not prefix-preserving: its generation prompt ends ``<think>\\n``, which a
finished turn (``<|im_start|>assistant\\n{content}``) does not render; the trajectory keeps the
sampled tokens.
"""

from __future__ import annotations

from agentfly.rollout.templates.format import FormatTemplate
from agentfly.rollout.templates.registry import register_template

_AGENTFLY_OBSERVATIONS = dict(
    observations_template=(
        "<|im_start|>user\n<tool_response>\n{observations}\n</tool_response><|im_end|>\n"
    ),
    observation_template="{observation}",
)

#: AgentFly's ``XLMToolCallTemplate``: the system message, then the XML tool-call format
#: (``<function=...>`` / ``<parameter=...>``); note the blank line after ``<|im_end|>``.
XML_TOOLS_SYSTEM = (
    "<|im_start|>system\n{system}\n\nYou have access to external functions (tools). When "
    "necessary, you may call them to help answer the user's query.\n\nAVAILABLE TOOLS:\n\n{tools}"
    "\n\nTool Call Format (STRICT)\n\nIf you decide to call a function, you MUST output "
    "**exactly** the following structure:\n\n<tool_call>\n<function=FUNCTION_NAME>\n"
    "<parameter=PARAMETER_NAME_1>\nVALUE_1\n</parameter>\n<parameter=PARAMETER_NAME_2>\nVALUE_2\n"
    "</parameter>\n...\n</function>\n</tool_call>\n\nRules\n\n1. Use XML format exactly as "
    "specified.\n\n2. `<function=...>` must contain the function name. Each argument must be "
    "wrapped in its own `<parameter=...>` block\n\n3. Always include all required parameters "
    "for the function. Use exact parameter names as defined in the tool schema\n\n\nExample\n\n"
    "<tool_call>\n<function=search>\n<parameter=query>\nweather in San Francisco\n</parameter>\n"
    "</function>\n</tool_call>\n\n<|im_end|>\n\n"
)

#: ``search-r1`` (Search-R1's prompt): a fixed system turn, then a user turn that holds the
#: system message and ``Question: `` and is never closed (the user text ends with a newline,
#: no ``<|im_end|>``); search results come back as ``<information>...</information>\n`` with
#: no role, and the next assistant turn follows.
SEARCH_R1 = FormatTemplate(
    name="search-r1",
    system_turn_for_tools=True,
    system_template=(
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
        "{system} Question: "
    ),
    default_system="",
    user_template="{content}\n",
    observations_template="<information>{observations}</information>\n",
    observation_template="{observation}",
)

#: ``qwen3-instruct-no-tool``: ChatML, the agent describes its tools, results in a user turn.
QWEN3_INSTRUCT_NO_TOOL = FormatTemplate(
    name="qwen3-instruct-no-tool", default_system="", **_AGENTFLY_OBSERVATIONS
)

#: ``qwen3-think-no-tool``: as ``qwen3-instruct-no-tool``, the generation prompt opens
#: ``<think>`` and every turn keeps its reasoning.
QWEN3_THINK_NO_TOOL = FormatTemplate(
    name="qwen3-think-no-tool",
    system_turn_for_tools=True,
    default_system="",
    generation_prompt="<|im_start|>assistant\n<think>",
    **_AGENTFLY_OBSERVATIONS,
)

#: ``qwen3-think``: ``qwen3-think-no-tool`` with Qwen3's tool catalogue written right after the
#: system text (no blank line between) when tools are passed, and no tool-call format line.
QWEN3_THINK = FormatTemplate(
    name="qwen3-think",
    system_turn_for_tools=True,
    default_system="",
    system_template_with_tools=(
        "<|im_start|>system\n{system}# Tools\n\nYou may call one or more functions to assist "
        "with the user query.\n\nYou are provided with function signatures within <tools></tools>"
        " XML tags:\n<tools>\n{tools}\n</tools><|im_end|>\n"
    ),
    generation_prompt="<|im_start|>assistant\n<think>",
    **_AGENTFLY_OBSERVATIONS,
)

#: ``qwen3-miniswe``: as ``qwen3-instruct-no-tool`` but the generation prompt ends ``<think>\n``
#: while a finished turn opens ``<|im_start|>assistant\n``: not prefix-preserving.
QWEN3_MINISWE = FormatTemplate(
    name="qwen3-miniswe",
    system_turn_for_tools=True,
    default_system="",
    generation_prompt="<|im_start|>assistant\n<think>\n",
    assistant_prefix="<|im_start|>assistant\n",
    **_AGENTFLY_OBSERVATIONS,
)

#: ``qwen-xml``: ChatML with the XML tool-call system prompt when tools are passed.
QWEN_XML = FormatTemplate(
    name="qwen-xml",
    system_turn_for_tools=True,
    default_system="",
    system_template_with_tools=XML_TOOLS_SYSTEM,
    **_AGENTFLY_OBSERVATIONS,
)

#: ``qwen-xml-think``: ``qwen-xml`` whose generation prompt opens ``<think>``.
QWEN_XML_THINK = FormatTemplate(
    name="qwen-xml-think",
    system_turn_for_tools=True,
    default_system="",
    system_template_with_tools=XML_TOOLS_SYSTEM,
    generation_prompt="<|im_start|>assistant\n<think>",
    **_AGENTFLY_OBSERVATIONS,
)

AGENTFLY_TEMPLATES = (
    SEARCH_R1, QWEN3_INSTRUCT_NO_TOOL, QWEN3_THINK_NO_TOOL, QWEN3_THINK, QWEN3_MINISWE, QWEN_XML,
    QWEN_XML_THINK,
)
for _template in AGENTFLY_TEMPLATES:
    register_template(_template.name, _template)
