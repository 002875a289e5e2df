"""The built-in templates of chat-bricks 0.1.5 (``chat_bricks/registry/builtin.py``), AgentFly's
template library: ``qwen2.5-think``, ``qwen3``, ``qwen3-instruct``, ``llama-3.2``, ``glm-4``,
``glm-4.5``, ``phi-4``, ``nemotron``, ``deepseek-r1-distill-qwen``, ``deepseek-v3.1``,
``deepseek-prover``, ``llemma``, ``kimi-k2-instruct``, and the vision templates ``qwen2.5-vl``,
``qwen2.5-vl-system-tool``, ``qwen3-vl-instruct``.

Transcribed, not imported: agentfly does not depend on chat-bricks at run time. Each constant
says which chat-bricks facts it carries and where agentfly departs from them. Common to all:

- Assistant content is the text the model sampled after the generation prompt; tool calls are
  part of it (chat-bricks' structured ``tool_calls`` slot stays empty).
- Consecutive tool messages share one observation turn, as chat-bricks' renderer joins them.
- Tool schemas are written with non-ASCII characters as is (chat-bricks' ``json.dumps``
  escapes them); identical for ASCII schemas.
- chat-bricks' Qwen-style ``"\\n" + content`` opener renders an *empty* assistant turn without
  the newline; here the generation prompt always opens it.
- Templates that chat-bricks gives no observation template (``phi-4``, ``glm-4``, ``llemma``,
  ``deepseek-prover``, ``deepseek-r1-distill-qwen``) render each tool result as a user turn of
  that template, as if the user had pasted it: chat-bricks raises on a tool message there.

Not prefix-preserving (:attr:`FormatTemplate.prefix_preserving` is False; the trajectory keeps
the sampled tokens, a re-render of the whole conversation differs from them): ``qwen3`` (its
generation prompt holds an empty think block that earlier turns lose on re-render),
``glm-4.5`` (the newline after ``<think></think>``) and ``deepseek-r1-distill-qwen`` (the
``<think>\\n`` opener).

Images (the vision templates): as chat-bricks' renderer writes them
(``chat_bricks/templates/renderer.py``: ``_encode_user_message``, ``_render_tool_observation``),
each image part of a user or tool message (``{"type": "image"}`` or ``{"type": "image_url"}``)
becomes one ``<|vision_start|><|image_pad|><|vision_end|>`` where it stands among the text parts,
which are joined with nothing; Qwen-VL's official templates place them the same way. The single
``<|image_pad|>`` is widened to the image's token count after tokenization
(``agentfly.rollout.vision``); chat-bricks widens it in the text, with the processor. Departures:

- Video parts are refused (chat-bricks writes ``<|video_pad|>`` for one in a user message, and
  raises on one in a tool message); so are images in system and assistant messages (chat-bricks
  reads only the first part of those and Qwen3-VL's template only their text, while
  Qwen2.5-VL's writes an image in any message).
- Only the three ``-vl`` templates show images; every other template refuses an image part with
  an error naming the template. chat-bricks also declares vision tokens for ``qwen2.5-think``,
  ``qwen3-instruct`` and ``kimi-k2-instruct`` (text models), and fails with a ``TypeError`` on
  an image for a template that declares none.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from agentfly.rollout.templates.base import tool_schema
from agentfly.rollout.templates.format import FormatTemplate
from agentfly.rollout.templates.qwen import HERMES_TOOLS
from agentfly.rollout.templates.registry import register_template

HERMES_CALL = (
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n"
)
QWEN3_TOOLS = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    "{tools}\n</tools>\n\n" + HERMES_CALL
    + '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)

#: Llama 3.x's own chat template writes this date when it is given no ``date_string`` (and
#: cannot call ``strftime_now``); chat-bricks writes today's date, which makes prompts depend
#: on the day they were rendered.
LLAMA_DEFAULT_DATE = "26 Jul 2024"

GLM_STOPS = ("<|user|>", "<|observation|>", "<|endoftext|>")
DEEPSEEK_BOS = "<｜begin▁of▁sentence｜>"
DEEPSEEK_EOS = "<｜end▁of▁sentence｜>"

#: One image in Qwen-VL's text: a single pad between the vision markers.
QWEN_VL_IMAGE = "<|vision_start|><|image_pad|><|vision_end|>"


def _qwen3_system(system: str, has_tools: bool) -> str:
    """A blank line between a system message and the tool block (chat-bricks' processor)."""
    return f"{system}\n\n" if system and has_tools else system


def _functions(tools: Sequence[Any]) -> list[Any]:
    """The ``function`` part of each OpenAI-style schema (chat-bricks' ToolMainContentProcessor)."""
    schemas = [tool_schema(t) for t in tools]
    return [s.get("function", s) for s in schemas]


def json_compact_list(tools: Sequence[Any]) -> str:
    """One JSON array, no spaces, keys sorted (chat-bricks' JsonCompactFormatter)."""
    return json.dumps([tool_schema(t) for t in tools], separators=(",", ":"), sort_keys=True,
                      ensure_ascii=False)


def json_compact_functions(tools: Sequence[Any]) -> str:
    """:func:`json_compact_list` of the ``function`` parts (Nemotron)."""
    return json.dumps(_functions(tools), separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def json_indented(tools: Sequence[Any]) -> str:
    """Each schema indented by 4, a blank line between (chat-bricks' JsonIndentedFormatter)."""
    return "\n\n".join(json.dumps(tool_schema(t), indent=4, ensure_ascii=False) for t in tools)


def llama32(date: str = LLAMA_DEFAULT_DATE, name: str = "llama-3.2") -> FormatTemplate:
    """chat-bricks 0.1.5 ``llama-3.2`` with a fixed date in the system header.

    Facts: the system turn always renders (``<|begin_of_text|>`` opens it) and starts with
    ``Cutting Knowledge Date: December 2023\\nToday Date: {date}\\n\\n``, preceded by
    ``Environment: ipython\\n`` when tools are passed; the tools themselves (indented JSON) go
    into the first user turn; a tool result is an ``ipython`` turn with the result in double
    quotes; turns end with ``<|eot_id|>`` and nothing after it.

    Args:
        date: the ``Today Date`` written into every system prompt (``"%d %b %Y"``); chat-bricks
            writes the rendering day's date, agentfly a fixed one so that a prompt does not
            change with the calendar (and prefix caches and recorded prompts stay valid).
        name: the template's name (register another date under another name).
    """

    def system(text: str, has_tools: bool) -> str:
        return f"Cutting Knowledge Date: December 2023\nToday Date: {date}\n\n{text}"

    return FormatTemplate(
        name=name,
        system_turn_for_tools=True,
        system_template=(
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n{tools}{system}"
            "<|eot_id|>"
        ),
        default_system="",
        system_processor=system,
        tools_template="Environment: ipython\n",
        user_template="<|start_header_id|>user<|end_header_id|>\n\n{content}<|eot_id|>",
        user_template_with_tools=(
            "<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please "
            "respond with a JSON for a function call with its proper arguments that best answers "
            'the given prompt.\n\nRespond in the format {"name": function name, "parameters": '
            "dictionary of argument name and its value}.Do not use variables.\n\n{tools}\n\n"
            "{content}<|eot_id|>"
        ),
        generation_prompt="<|start_header_id|>assistant<|end_header_id|>\n\n",
        end_of_turn_marker="<|eot_id|>",
        turn_suffix="",
        observations_template=(
            '<|start_header_id|>ipython<|end_header_id|>\n\n"{observations}"<|eot_id|>'
        ),
        observation_template="{observation}",
        format_tools=json_indented,
    )


#: ``qwen2.5-think``: ChatML, a default system prompt asking for ``<think>``/``<answer>``, the
#: hermes tool block (asking to think before each call) appended to the system text; the
#: generation prompt opens ``<think>``; consecutive tool results are written back to back in
#: one ``<tool_response>`` block of one user turn (chat-bricks joins them with nothing).
QWEN25_THINK = FormatTemplate(
    name="qwen2.5-think",
    system_turn_for_tools=True,
    default_system=(
        "You are a helpful assistant. To answer the user's question, you first think about the "
        "reasoning process and then provide the user with the answer. The reasoning process and "
        "answer are enclosed within <think> </think> and <answer> </answer> tags, respectively, "
        "i.e., <think> reasoning process here </think> <answer> answer here </answer>."
    ),
    tools_template=(
        "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        "{tools}\n</tools>\n\n" + HERMES_CALL + "<think> [reasoning process here] </think>\n"
        '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>\n'
        "You must think first before calling any tool."
    ),
    generation_prompt="<|im_start|>assistant\n<think>",
    observations_template="<|im_start|>user\n<tool_response>\n{observations}\n</tool_response><|im_end|>\n",
    observation_template="{observation}",
)

#: ``qwen3`` (chat-bricks' ``Qwen3Template``, thinking off, its default): no system turn
#: without a system message or tools; the tool block follows the system text after a blank
#: line; the generation prompt ends with an empty think block ``<think>\n\n</think>\n\n``;
#: re-rendered, earlier assistant turns lose every ``<think>...</think>`` (that block included),
#: so the template is not prefix-preserving. Tool results as in ``qwen2.5``.
QWEN3 = FormatTemplate(
    name="qwen3",
    system_turn_for_tools=True,
    system_template="<|im_start|>system\n{system}{tools}<|im_end|>\n",
    system_processor=_qwen3_system,
    tools_template=QWEN3_TOOLS,
    generation_prompt="<|im_start|>assistant\n<think>\n\n</think>\n\n",
    assistant_prefix="<|im_start|>assistant\n",
    strip_earlier_thinking=True,
)

#: ``qwen3-instruct`` (Qwen3-Instruct-2507): ``qwen3``'s system turn and tool block, no
#: thinking, nothing stripped; tool results as in ``qwen2.5``.
QWEN3_INSTRUCT = FormatTemplate(
    name="qwen3-instruct",
    system_turn_for_tools=True,
    system_template="<|im_start|>system\n{system}{tools}<|im_end|>\n",
    system_processor=_qwen3_system,
    tools_template=QWEN3_TOOLS,
)

#: ``qwen2.5-vl`` (Qwen2.5-VL-Instruct): ChatML, Qwen-VL's default system prompt ("You are a
#: helpful assistant."), no tool catalogue (the agent's prompt describes its tools); tool
#: results in a ``tool`` turn, consecutive ones written back to back with nothing between (Qwen2.5-VL's
#: own template gives each tool message a turn of its own; the text is the same for one).
QWEN25_VL = FormatTemplate(
    name="qwen2.5-vl",
    default_system="You are a helpful assistant.",
    observations_template="<|im_start|>tool\n{observations}<|im_end|>\n",
    observation_template="{observation}",
    image_placeholder=QWEN_VL_IMAGE,
)

#: ``qwen2.5-vl-system-tool``: ``qwen2.5-vl`` with Qwen2.5's hermes tool block appended to the
#: system text; tool results still in a ``tool`` turn.
QWEN25_VL_SYSTEM_TOOL = dataclasses.replace(
    QWEN25_VL, name="qwen2.5-vl-system-tool", tools_template=HERMES_TOOLS
)

#: ``qwen3-vl-instruct`` (Qwen3-VL-Instruct): ``qwen3-instruct`` with images (chat-bricks'
#: definitions of the two are the same but for the name).
QWEN3_VL_INSTRUCT = dataclasses.replace(
    QWEN3_INSTRUCT, name="qwen3-vl-instruct", image_placeholder=QWEN_VL_IMAGE
)

#: ``glm-4``: ``[gMASK]<sop>``, ``<|system|>`` / ``<|user|>`` / ``<|assistant|>`` role lines,
#: no turn terminator and no tools. Departures: chat-bricks lists the empty string as its stop
#: word; agentfly stops on GLM's role markers, as GLM-4's generation config does (a sampled
#: marker opens the next turn and is not written twice), and a tool result is a user turn.
GLM4 = FormatTemplate(
    name="glm-4",
    system_turn_for_tools=True,
    prefix="[gMASK]<sop>",
    system_template="<|system|>\n{system}",
    user_template="<|user|>\n{content}",
    generation_prompt="<|assistant|>\n",
    end_of_turn_marker="",
    turn_suffix="",
    stop_words=GLM_STOPS,
    observations_template="{observations}",
    observation_template="<|user|>\n{observation}",
)

#: ``glm-4.5`` (GLM-4.5 / 4.6, non-thinking): ``glm-4``'s layout, the system turn always
#: rendered (empty by default) with the hermes tool block, tool results in an
#: ``<|observation|>`` turn of ``<tool_response>`` blocks, stops on the role markers. The
#: generation prompt ends ``<think></think>\n`` but a finished turn renders
#: ``<think></think>{content}``: not prefix-preserving (the newline).
GLM45 = FormatTemplate(
    name="glm-4.5",
    system_turn_for_tools=True,
    prefix="[gMASK]<sop>",
    system_template="<|system|>\n{system}{tools}",
    default_system="",
    tools_template="\n\n" + QWEN3_TOOLS,
    user_template="<|user|>\n{content}",
    generation_prompt="<|assistant|>\n<think></think>\n",
    assistant_prefix="<|assistant|>\n<think></think>",
    end_of_turn_marker="",
    turn_suffix="",
    stop_words=GLM_STOPS,
    observations_template="<|observation|>{observations}",
)

#: ``phi-4``: ChatML with ``<|im_sep|>`` after the role and nothing after ``<|im_end|>``; the
#: system turn always rendered (empty by default); no tools; a tool result is a user turn.
PHI4 = FormatTemplate(
    name="phi-4",
    system_turn_for_tools=True,
    system_template="<|im_start|>system<|im_sep|>{system}<|im_end|>",
    default_system="",
    user_template="<|im_start|>user<|im_sep|>{content}<|im_end|>",
    generation_prompt="<|im_start|>assistant<|im_sep|>",
    turn_suffix="",
    observations_template="{observations}",
    observation_template="<|im_start|>user<|im_sep|>{observation}<|im_end|>",
)

#: ``nemotron`` (Llama-3.1-Nemotron): Llama 3 headers; the system turn always rendered, its
#: text after a newline, the tools as one compact JSON array of their ``function`` parts in
#: ``<AVAILABLE_TOOLS>``; a tool result is a user turn ``<TOOL_RESPONSE>[...]</TOOL_RESPONSE>``.
NEMOTRON = FormatTemplate(
    name="nemotron",
    system_turn_for_tools=True,
    system_template=(
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n{system}{tools}<|eot_id|>"
    ),
    default_system="",
    system_processor=lambda system, has_tools: f"\n{system}",
    tools_template="<AVAILABLE_TOOLS>{tools}</AVAILABLE_TOOLS>",
    user_template="<|start_header_id|>user<|end_header_id|>\n\n{content}<|eot_id|>",
    generation_prompt="<|start_header_id|>assistant<|end_header_id|>\n\n",
    end_of_turn_marker="<|eot_id|>",
    turn_suffix="",
    observations_template=(
        "<|start_header_id|>user<|end_header_id|>\n\n<TOOL_RESPONSE>[{observations}]"
        "</TOOL_RESPONSE><|eot_id|>"
    ),
    observation_template="{observation}",
    format_tools=json_compact_functions,
)

#: ``deepseek-r1-distill-qwen``: BOS, the system text bare, ``<｜User｜>`` / ``<｜Assistant｜>``,
#: turns closed by the EOS; no tools; a tool result is a user turn. The generation prompt
#: opens ``<think>\n`` but a finished turn renders ``<｜Assistant｜>{content}``: not
#: prefix-preserving (chat-bricks meant it for single-turn use).
DEEPSEEK_R1_DISTILL_QWEN = FormatTemplate(
    name="deepseek-r1-distill-qwen",
    system_turn_for_tools=True,
    prefix=DEEPSEEK_BOS,
    system_template="{system}",
    user_template="<｜User｜>{content}",
    generation_prompt="<｜Assistant｜><think>\n",
    assistant_prefix="<｜Assistant｜>",
    end_of_turn_marker=DEEPSEEK_EOS,
    turn_suffix="",
    observations_template="{observations}",
    observation_template="<｜User｜>{observation}",
)

#: ``deepseek-v3.1`` (non-thinking): BOS, the system text bare with a ``## Tools`` section,
#: generation prompt ``<｜Assistant｜></think>``; tool results in
#: ``<｜tool▁outputs▁begin｜>`` / ``<｜tool▁output▁begin｜>`` blocks, no role of their own.
DEEPSEEK_V31 = FormatTemplate(
    name="deepseek-v3.1",
    system_turn_for_tools=True,
    prefix=DEEPSEEK_BOS,
    system_template="{system}{tools}",
    tools_template=(
        "\n\n## Tools\nYou have access to the following tools:\n\n{tools}\n\n## Tool Use Rules\n"
        "When you need to call a tool, output it in the following format:\n"
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGUMENTS<｜tool▁call▁end｜>"
        "<｜tool▁calls▁end｜>\nwhere NAME is the function name and ARGUMENTS is a JSON object "
        "with the function arguments."
    ),
    user_template="<｜User｜>{content}",
    generation_prompt="<｜Assistant｜></think>",
    end_of_turn_marker=DEEPSEEK_EOS,
    turn_suffix="",
    observations_template="<｜tool▁outputs▁begin｜>{observations}<｜tool▁outputs▁end｜>",
    observation_template="<｜tool▁output▁begin｜>{observation}<｜tool▁output▁end｜>",
)

#: ``deepseek-prover`` (DeepSeek-Coder's instruction format): the Coder system prompt,
#: ``### Instruction:`` / ``### Response:`` sections; a finished turn ends ``\n<|EOT|>\n``.
#: The stop string is ``<|EOT|>``; a turn whose sampled text ends ``\n<|EOT|>`` is closed as
#: the template writes it. No tools; a tool result is an instruction section.
DEEPSEEK_PROVER = FormatTemplate(
    name="deepseek-prover",
    system_turn_for_tools=True,
    system_template="{system}\n",
    default_system=(
        "You are an AI programming assistant, utilizing the Deepseek Coder model, developed by "
        "Deepseek Company, and you only answer questions related to computer science. For "
        "politically sensitive questions, security and privacy issues, and other non-computer "
        "science questions, you will refuse to answer."
    ),
    user_template="### Instruction:\n{content}\n",
    generation_prompt="### Response:\n",
    end_of_turn_marker="\n<|EOT|>",
    stop_words=("<|EOT|>",),
    observations_template="{observations}",
    observation_template="### Instruction:\n{observation}\n",
)

#: ``llemma``: ``Input:{content}\n\n`` / ``Response:{content}</s>``, no system text by
#: default, no tools; a tool result is an input section.
LLEMMA = FormatTemplate(
    name="llemma",
    system_turn_for_tools=True,
    system_template="{system}",
    default_system="",
    user_template="Input:{content}\n\n",
    generation_prompt="Response:",
    end_of_turn_marker="</s>",
    turn_suffix="",
    observations_template="{observations}",
    observation_template="Input:{observation}\n\n",
)

#: ``kimi-k2-instruct``: the tool declaration (one compact JSON array) comes before the
#: system turn; the default system prompt (Kimi's) is followed by a newline, a given one is
#: not; ``<|im_user|>`` / ``<|im_assistant|>`` turns with ``<|im_middle|>``; each tool result
#: is a ``tool`` system turn opening ``## Return of \n`` (chat-bricks leaves out the call id).
KIMI_K2_INSTRUCT = FormatTemplate(
    name="kimi-k2-instruct",
    system_turn_for_tools=True,
    system_template="{tools}<|im_system|>system<|im_middle|>{system}<|im_end|>",
    default_system_template="{tools}<|im_system|>system<|im_middle|>{system}<|im_end|>\n",
    default_system="You are Kimi, an AI assistant created by Moonshot AI.",
    tools_template="<|im_system|>tool_declare<|im_middle|>{tools}<|im_end|>",
    user_template="<|im_user|>user<|im_middle|>{content}<|im_end|>",
    generation_prompt="<|im_assistant|>assistant<|im_middle|>",
    turn_suffix="",
    observations_template="{observations}",
    observation_template="<|im_system|>tool<|im_middle|>## Return of \n{observation}<|im_end|>",
    format_tools=json_compact_list,
)

LIBRARY = (
    QWEN25_THINK, QWEN3, QWEN3_INSTRUCT, llama32(), GLM4, GLM45, PHI4, NEMOTRON,
    DEEPSEEK_R1_DISTILL_QWEN, DEEPSEEK_V31, DEEPSEEK_PROVER, LLEMMA, KIMI_K2_INSTRUCT,
    QWEN25_VL, QWEN25_VL_SYSTEM_TOOL, QWEN3_VL_INSTRUCT,
)
for _template in LIBRARY:
    register_template(_template.name, _template)

