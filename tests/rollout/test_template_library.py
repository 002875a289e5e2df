"""The templates transcribed from chat-bricks 0.1.5 (``library.py``) and from AgentFly's own
registry (``agentfly_registry.py``): token-exact over four assistant turns with tool results.

Expected renderings come from outside agentfly's code: chat-bricks 0.1.5 itself renders its
built-ins (the ``test`` extra installs it), and AgentFly's definitions, copied verbatim below,
are rendered by a few lines that follow chat-bricks 0.1.3's rules (the version whose field names
AgentFly's registry uses). Prefix-preserving templates: the ids built turn by turn equal the
tokenization of that whole rendering. The others keep the sampled tokens, and the whole rendering
differs from them exactly by the text the template drops from earlier turns.
"""

from __future__ import annotations

import copy
import datetime
import json
import re

import pytest

from agentfly.core.registry import UnknownNameError
from agentfly.rollout.templates import TEMPLATES, ChatTemplate, get_template
from agentfly.rollout.templates.library import LLAMA_DEFAULT_DATE, llama32
from tests.rollout.test_templates import CALCULATOR

CHAT_BRICKS = [
    "qwen2.5-think", "qwen3", "qwen3-instruct", "llama-3.2", "glm-4", "glm-4.5", "phi-4",
    "nemotron", "deepseek-r1-distill-qwen", "deepseek-v3.1", "deepseek-prover", "llemma",
    "kimi-k2-instruct", "qwen2.5-vl", "qwen2.5-vl-system-tool", "qwen3-vl-instruct",
]
AGENTFLY = [
    "search-r1", "qwen3-instruct-no-tool", "qwen3-think-no-tool", "qwen3-think", "qwen3-miniswe",
    "qwen-xml", "qwen-xml-think",
]
#: chat-bricks gives these no observation template: agentfly renders a tool result as a user turn
NO_OBSERVATION = {"phi-4", "glm-4", "llemma", "deepseek-prover", "deepseek-r1-distill-qwen"}
#: (how a finished assistant turn opens when re-rendered, what the generation prompt adds to it)
NOT_PREFIX_PRESERVING = {
    "qwen3": ("<|im_start|>assistant\n", "<think>\n\n</think>\n\n"),
    "glm-4.5": ("<|assistant|>\n<think></think>", "\n"),
    "deepseek-r1-distill-qwen": ("<｜Assistant｜>", "<think>\n"),
    "qwen3-miniswe": ("<|im_start|>assistant\n", "<think>\n"),
}

# (sampled content without the end of turn, whether the turn was closed, tool results); the
# second turn was cut by max_tokens, the third called two tools, the fourth is answered by a user
TURNS = [
    ('Let me compute.\n<tool_call>\n{"name": "calculator", "arguments": {"expression": "12*34"}}'
     "\n</tool_call>", True, ["408"]),
    ("The product is 408, now I add 5 and", False, ["error: no tool call found"]),
    ('Calling twice.\n<tool_call>\n{"name": "calculator", "arguments": {"expression": "408+5"}}'
     '\n</tool_call>\n<tool_call>\n{"name": "calculator", "arguments": {"expression": "1+1"}}'
     "\n</tool_call>", True, ["413", "2"]),
    ("The answer is 413. <answer>413</answer>", True, []),
]
FOLLOW_UP = "Thanks. Are you sure?"

# Special tokens of the templates' own tokenizers, added to the test tokenizer so that a marker
# is one token, as it is for the real model.
SPECIAL = re.compile(r"<\|[A-Za-z_]+\|>|<｜[^｜]+｜>|\[gMASK\]|<sop>|</s>")

# AgentFly's templates as its registry writes them (src/agentfly/templates/registry.py, commit
# 1256586), chat-bricks 0.1.3 field names, copied verbatim.
XLMToolCallTemplate = """<|im_start|>system\n{system_message}

You have access to external functions (tools). When necessary, you may call them to help answer the user's query.

AVAILABLE TOOLS:

{tools}

Tool Call Format (STRICT)

If you decide to call a function, you MUST output **exactly** the following structure:

<tool_call>
<function=FUNCTION_NAME>
<parameter=PARAMETER_NAME_1>
VALUE_1
</parameter>
<parameter=PARAMETER_NAME_2>
VALUE_2
</parameter>
...
</function>
</tool_call>

Rules

1. Use XML format exactly as specified.

2. `<function=...>` must contain the function name. Each argument must be wrapped in its own `<parameter=...>` block

3. Always include all required parameters for the function. Use exact parameter names as defined in the tool schema


Example

<tool_call>
<function=search>
<parameter=query>
weather in San Francisco
</parameter>
</function>
</tool_call>

<|im_end|>\n
"""
_TOOL = "<|im_start|>user\n<tool_response>\n{observation}\n</tool_response><|im_end|>\n"
AGENTFLY_DEFINITIONS = {
    "search-r1": dict(
        system_template="<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n{system_message} Question: ",
        user_template="{content}\n",
        assistant_template="<|im_start|>assistant\n{content}<|im_end|>\n",
        tool_template="<information>{observation}</information>\n",
    ),
    "qwen3-instruct-no-tool": dict(
        system_template="<|im_start|>system\n{system_message}<|im_end|>\n",
        user_template="<|im_start|>user\n{content}<|im_end|>\n",
        assistant_template="<|im_start|>assistant\n{content}<|im_end|>\n",
        generation_prompt="<|im_start|>assistant\n",
        tool_template=_TOOL,
    ),
    "qwen3-think-no-tool": dict(
        system_template="<|im_start|>system\n{system_message}<|im_end|>\n",
        user_template="<|im_start|>user\n{content}<|im_end|>\n",
        assistant_template="<|im_start|>assistant\n<think>{content}<|im_end|>\n",
        generation_prompt="<|im_start|>assistant\n<think>",
        tool_template=_TOOL,
    ),
    "qwen3-think": dict(
        system_template="<|im_start|>system\n{system_message}<|im_end|>\n",
        system_template_with_tools="""<|im_start|>system\n{system_message}# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{tools}\n</tools><|im_end|>\n""",
        user_template="<|im_start|>user\n{content}<|im_end|>\n",
        assistant_template="<|im_start|>assistant\n<think>{content}<|im_end|>\n",
        generation_prompt="<|im_start|>assistant\n<think>",
        tool_template=_TOOL,
    ),
    "qwen3-miniswe": dict(
        system_template="<|im_start|>system\n{system_message}<|im_end|>\n",
        user_template="<|im_start|>user\n{content}<|im_end|>\n",
        assistant_template="<|im_start|>assistant\n{content}<|im_end|>\n",
        generation_prompt="<|im_start|>assistant\n<think>\n",
        tool_template=_TOOL,
    ),
    "qwen-xml": dict(
        system_template="<|im_start|>system\n{system_message}<|im_end|>\n",
        system_template_with_tools=XLMToolCallTemplate,
        user_template="<|im_start|>user\n{content}<|im_end|>\n",
        assistant_template="<|im_start|>assistant\n{content}<|im_end|>\n",
        generation_prompt="<|im_start|>assistant\n",
        tool_template=_TOOL,
    ),
    "qwen-xml-think": dict(
        system_template="<|im_start|>system\n{system_message}<|im_end|>\n",
        system_template_with_tools=XLMToolCallTemplate,
        user_template="<|im_start|>user\n{content}<|im_end|>\n",
        assistant_template="<|im_start|>assistant\n<think>{content}<|im_end|>\n",
        generation_prompt="<|im_start|>assistant\n<think>",
        tool_template=_TOOL,
    ),
}


def agentfly_render(name: str, messages: list[dict], tools: list | None) -> str:
    """chat-bricks 0.1.3's ``Template.render(..., add_generation_prompt=True)`` for AgentFly's
    definitions: the system message defaults to ""; tools (one JSON object per line) only reach
    ``system_template_with_tools``; consecutive tool results are joined with nothing, then
    wrapped once; the generation prompt defaults to the assistant template's prefix."""
    d = AGENTFLY_DEFINITIONS[name]
    has_system = messages[0]["role"] == "system"
    system = messages[0]["content"] if has_system else ""
    if tools and "system_template_with_tools" in d:
        catalogue = "\n".join(json.dumps(t) for t in tools)
        text = d["system_template_with_tools"].format(system_message=system, tools=catalogue)
    else:
        text = d["system_template"].format(system_message=system)
    body = messages[1:] if has_system else messages
    results: list[str] = []
    for i, m in enumerate(body):
        if m["role"] == "tool":
            results.append(m["content"])
            if i + 1 == len(body) or body[i + 1]["role"] != "tool":
                text += d["tool_template"].format(observation="".join(results))
                results = []
        else:
            text += d[f"{m['role']}_template"].format(content=m["content"])
    return text + (d.get("generation_prompt") or d["assistant_template"].split("{content}")[0])


@pytest.fixture
def chat_bricks(monkeypatch):
    """chat-bricks 0.1.5, its Llama-3.2 date fixed to agentfly's default."""
    cb = pytest.importorskip("chat_bricks")
    from chat_bricks.policies import system_policy

    class _Today(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime.datetime.strptime(LLAMA_DEFAULT_DATE, "%d %b %Y")

    monkeypatch.setattr(system_policy, "datetime", type("m", (), {"datetime": _Today}))
    return cb


def chat_bricks_render(cb, name: str, messages: list[dict], tools: list | None) -> str:
    if name in NO_OBSERVATION:  # agentfly's choice: a tool result is a user turn
        messages = [{**m, "role": "user"} if m["role"] == "tool" else m for m in messages]
    return cb.get_template(name).render(copy.deepcopy(messages), tools=tools,
                                        add_generation_prompt=True)[0]


@pytest.fixture(params=["tiny", "smollm2"])
def base_tokenizer(request, tiny_tokenizer):
    if request.param == "tiny":
        return tiny_tokenizer
    from transformers import PreTrainedTokenizerFast

    from agentfly.models.smollm2 import default_dir, is_prepared

    if not is_prepared(default_dir()):
        pytest.skip("SmolLM2 is not prepared here (python -m agentfly.models.smollm2)")
    return PreTrainedTokenizerFast.from_pretrained(default_dir())


def with_specials(tokenizer, *texts: str):
    """A copy of ``tokenizer`` for which every marker in ``texts`` is one special token."""
    tokenizer = copy.deepcopy(tokenizer)
    markers = sorted({m for t in texts for m in SPECIAL.findall(t)})
    tokenizer.add_special_tokens({"additional_special_tokens": markers})
    return tokenizer


def closer(template: ChatTemplate, next_role: str) -> str:
    """What the model samples to end its turn: the end-of-turn marker, or for GLM (none) the
    role marker of the turn that follows."""
    if template.end_of_turn:
        return template.end_of_turn
    return "<|observation|>" if next_role == "tool" and template.name == "glm-4.5" else "<|user|>"


def start(system: bool) -> list[dict]:
    messages = [{"role": "user", "content": "What is 12*34+5? Use the calculator."}]
    if system:
        messages.insert(0, {"role": "system", "content": "You solve arithmetic with tools."})
    return messages


def rollout(template: ChatTemplate, system: bool, tools, encode=None):
    """The agent loop's bookkeeping over TURNS: (messages, text built turn by turn, ids built
    turn by turn: the prompt's, then each turn's sampled ids and each text between turns' ids)."""
    messages = start(system)
    text = template.prompt(messages, tools)
    ids = encode(text) if encode else None
    for content, closed, observations in TURNS:
        sampled = content + (closer(template, "tool" if observations else "user") if closed else "")
        assert template.split_turn(sampled) == (content, closed)
        messages.append({"role": "assistant", "content": content})
        messages += [{"role": "tool", "content": o} for o in observations]
        if not observations:
            messages.append({"role": "user", "content": FOLLOW_UP})
        between = template.between_turns(messages, tools, closed=closed)
        text += sampled + between
        if encode:
            ids += encode(sampled) + encode(between)
    return messages, text, ids


def check_token_exact(name: str, expected: str, system: bool, base_tokenizer) -> None:
    template = get_template(name)
    _, text, _ = rollout(template, system, [CALCULATOR])
    tokenizer = with_specials(base_tokenizer, expected, text)

    def encode(s: str) -> list[int]:
        return tokenizer.encode(s, add_special_tokens=False)

    _, text, ids = rollout(template, system, [CALCULATOR], encode)
    if name not in NOT_PREFIX_PRESERVING:
        assert template.prefix_preserving
        assert text == expected
        smollm2 = "smollm2" in str(base_tokenizer.name_or_path)
        if smollm2 and template.generation_prompt.endswith("\n\n"):
            # SmolLM2's GPT-2 pre-tokenizer reads "\n\nLet" as "\n" "\nLet", so a prompt
            # ending in a blank line (Llama 3's headers) re-tokenizes differently once text
            # follows; Llama 3's own pre-tokenizer keeps "\n\n" whole. The ids still spell it.
            assert tokenizer.decode(ids) == expected
        else:
            assert ids == encode(expected)
        return
    # The trajectory keeps what the model saw and sampled; the template's whole rendering drops
    # the generation prompt's tail from every earlier assistant turn, and only that.
    opener, tail = NOT_PREFIX_PRESERVING[name]
    assert not template.prefix_preserving
    assert tokenizer.decode(ids) == text != expected
    assert text.count(opener + tail) == len(TURNS) + 1 and expected.count(opener + tail) == 1
    assert text == expected.replace(opener + tail, opener).replace(opener, opener + tail)


@pytest.mark.parametrize("name", CHAT_BRICKS)
@pytest.mark.parametrize("system", [False, True])
def test_chat_bricks_templates_are_token_exact(name, system, chat_bricks, base_tokenizer):
    messages, _, _ = rollout(get_template(name), system, [CALCULATOR])
    expected = chat_bricks_render(chat_bricks, name, messages, [CALCULATOR])
    check_token_exact(name, expected, system, base_tokenizer)


@pytest.mark.parametrize("name", AGENTFLY)
@pytest.mark.parametrize("system", [False, True])
@pytest.mark.parametrize("with_tools", [False, True])
def test_agentfly_templates_are_token_exact(name, system, with_tools, base_tokenizer):
    tools = [CALCULATOR] if with_tools else None
    messages, _, _ = rollout(get_template(name), system, tools)
    expected = agentfly_render(name, messages, tools)
    template = get_template(name)
    _, text, _ = rollout(template, system, tools)
    if name in NOT_PREFIX_PRESERVING:
        opener, tail = NOT_PREFIX_PRESERVING[name]
        assert text == expected.replace(opener + tail, opener).replace(opener, opener + tail)
    else:
        assert text == expected
    if with_tools:
        check_token_exact(name, expected, system, base_tokenizer)


@pytest.mark.parametrize("name", CHAT_BRICKS + AGENTFLY)
def test_direct_text_between_turns_equals_the_difference_of_renders(name):
    template = get_template(name)
    if not template.prefix_preserving:
        pytest.skip("the difference of renders drops what the model saw")
    messages = [*start(True), {"role": "assistant", "content": "call"},
                {"role": "tool", "content": "1"}, {"role": "tool", "content": "2"}]
    # a sampled stop string that opens the next turn (GLM) is not written again when closed
    for closed in (True, False) if template.end_of_turn else (False,):
        direct = template.between_turns(messages, [CALCULATOR], closed=closed)
        assert direct == ChatTemplate.between_turns(template, messages, [CALCULATOR], closed=closed)


def test_search_r1_and_qwen_xml_text_as_agentfly_writes_them():
    search = get_template("search-r1")
    messages = [{"role": "system", "content": "Search when needed."},
                {"role": "user", "content": "Who wrote Hamlet?"}]
    assert search.prompt(messages) == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
        "Search when needed. Question: Who wrote Hamlet?\n<|im_start|>assistant\n")
    messages += [{"role": "assistant", "content": "<search>Hamlet</search>"},
                 {"role": "tool", "content": "Shakespeare"}]
    assert search.between_turns(messages) == (
        "\n<information>Shakespeare</information>\n<|im_start|>assistant\n")
    xml = get_template("qwen-xml").prompt([{"role": "user", "content": "hi"}], [CALCULATOR])
    assert xml.startswith("<|im_start|>system\n\n\nYou have access to external functions")
    assert "AVAILABLE TOOLS:\n\n" + json.dumps(CALCULATOR) + "\n\nTool Call Format" in xml
    assert xml.endswith("</tool_call>\n\n<|im_end|>\n\n<|im_start|>user\nhi<|im_end|>\n"
                        "<|im_start|>assistant\n")


def test_llama_date_is_fixed_and_configurable():
    messages = [{"role": "user", "content": "hi"}]
    header = ("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
              "Cutting Knowledge Date: December 2023\nToday Date: {}\n\n<|eot_id|>")
    assert get_template("llama-3.2").prompt(messages).startswith(header.format("26 Jul 2024"))
    assert llama32(date="01 Jan 2025").prompt(messages).startswith(header.format("01 Jan 2025"))


def test_stops_of_templates_without_a_turn_terminator():
    glm = get_template("glm-4.5")
    assert glm.stop == ["<|user|>", "<|observation|>", "<|endoftext|>"]
    assert glm.split_turn("x<|observation|>") == ("x", True)
    assert glm.split_turn("x") == ("x", False)
    assert glm.prompt([{"role": "user", "content": "hi"}]).endswith(
        "<|user|>\nhi<|assistant|>\n<think></think>\n")
    prover = get_template("deepseek-prover")
    assert prover.stop == ["<|EOT|>"]
    assert prover.split_turn("x\n<|EOT|>") == ("x", True)  # as the template writes it
    assert prover.split_turn("x<|EOT|>") == ("x", True)  # closed, without the newline


def test_every_name_is_registered_and_an_unknown_one_is_refused_with_the_list():
    assert set(CHAT_BRICKS + AGENTFLY) <= set(TEMPLATES.names())
    with pytest.raises(UnknownNameError) as refused:
        get_template("qwen3-thinking")
    for name in ("qwen3-think", "glm-4.5", "search-r1", "kimi-k2-instruct"):
        assert name in str(refused.value)
