"""Chat templates: text format, prefix preservation (text and tokens), registry behaviour."""

from __future__ import annotations

import copy
import json

import pytest

from agentfly.core.registry import UnknownNameError
from agentfly.rollout.templates import (
    TEMPLATES,
    ChatTemplate,
    FormatTemplate,
    ModelTemplate,
    TemplateNotPrefixPreservingError,
    get_template,
    register_template,
)

NAMED = ["qwen2.5", "qwen2.5-no-system-tool", "qwen-chat", "action-agent"]

CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string", "description": "e.g. 12*(3+4)"}},
            "required": ["expression"],
        },
    },
}

# Assistant turns as the engine would return them: (text of the sampled tokens, tool results).
# The second turn was cut by max_tokens (no end-of-turn marker), the third calls two tools.
TURNS = [
    (
        'Let me compute.\n<tool_call>\n{"name": "calculator", "arguments": '
        '{"expression": "12*34"}}\n</tool_call><|im_end|>',
        ["408"],
    ),
    ("The product is 408, now I add 5 and", ["error: no tool call found"]),
    (
        '<tool_call>\n{"name": "calculator", "arguments": {"expression": "408+5"}}\n'
        '</tool_call>\n<tool_call>\n{"name": "calculator", "arguments": {"expression": "1+1"}}'
        "\n</tool_call><|im_end|>",
        ["413", "2"],
    ),
    ("The answer is 413. <answer>413</answer><|im_end|>", []),
]


def _start(system: bool) -> list[dict]:
    messages = [{"role": "user", "content": "What is 12*34+5? Use the calculator."}]
    if system:
        messages.insert(0, {"role": "system", "content": "You solve arithmetic with tools."})
    return messages


def _rollout(template: ChatTemplate, system: bool, tools, encode=None):
    """Run the agent loop's text (and token) bookkeeping over TURNS.

    Returns the final message list, the text built incrementally and, with ``encode``, the ids
    built incrementally (prompt ids, then each turn's "sampled" ids, then each text between turns' ids).
    """
    messages = _start(system)
    text = template.prompt(messages, tools)
    ids = encode(text) if encode else None
    for sampled, observations in TURNS:
        content, closed = template.split_turn(sampled)
        messages.append({"role": "assistant", "content": content})
        messages += [{"role": "tool", "content": o} for o in observations]
        if not observations:
            messages.append({"role": "user", "content": "Thanks. Are you sure?"})
        between = template.between_turns(messages, tools, closed=closed)
        text += sampled + between
        if encode:
            ids += encode(sampled) + encode(between)
    return messages, text, ids


@pytest.mark.parametrize("name", NAMED)
@pytest.mark.parametrize("system", [False, True])
@pytest.mark.parametrize("with_tools", [False, True])
def test_named_templates_are_prefix_preserving_as_text(name, system, with_tools):
    template = get_template(name)
    tools = [CALCULATOR] if with_tools else None
    messages, text, _ = _rollout(template, system, tools)
    assert text == template.render(messages, tools, add_generation_prompt=True)


@pytest.mark.parametrize("name", NAMED)
def test_direct_text_between_turns_equals_the_difference_of_renders(name):
    template = get_template(name)
    messages = [
        *_start(True),
        {"role": "assistant", "content": "call"},
        {"role": "tool", "content": "1"},
        {"role": "tool", "content": "2"},
    ]
    for closed in (True, False):
        direct = template.between_turns(messages, [CALCULATOR], closed=closed)
        diffed = ChatTemplate.between_turns(template, messages, [CALCULATOR], closed=closed)
        assert direct == diffed


@pytest.mark.parametrize("name", [*NAMED, None])
@pytest.mark.parametrize("system", [False, True])
def test_templates_are_prefix_preserving_as_tokens(name, system, tiny_tokenizer):
    template = get_template(name, tiny_tokenizer)

    def encode(text: str) -> list[int]:
        return tiny_tokenizer.encode(text, add_special_tokens=False)

    messages, _, ids = _rollout(template, system, [CALCULATOR], encode)
    assert ids == encode(template.render(messages, [CALCULATOR], add_generation_prompt=True))


def test_qwen25_matches_the_official_chat_template(tiny_tokenizer):
    """The tiny tokenizer carries Qwen2.5-Instruct's jinja template: both must render alike."""
    ours, official = get_template("qwen2.5"), get_template(None, tiny_tokenizer)
    for system in (False, True):
        for tools in (None, [CALCULATOR]):
            messages, _, _ = _rollout(ours, system, tools)
            assert ours.render(messages, tools, True) == official.render(messages, tools, True)


def test_qwen25_text_format():
    template = get_template("qwen2.5")
    prompt = template.prompt([{"role": "user", "content": "hi"}], [CALCULATOR])
    assert prompt.startswith(
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
        "\n\n# Tools\n\n"
    )
    assert f"<tools>\n{json.dumps(CALCULATOR)}\n</tools>" in prompt
    assert prompt.endswith(
        '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
        "<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )
    between = template.between_turns(
        [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "x"},
            {"role": "tool", "content": "408"},
        ],
        closed=True,
    )
    assert between == (
        "\n<|im_start|>user\n<tool_response>\n408\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert template.stop == ["<|im_end|>"]


def test_no_system_tool_leaves_tools_to_the_agent():
    messages = [{"role": "user", "content": "hi"}]
    template = get_template("qwen2.5-no-system-tool")
    assert (
        template.prompt(messages, [CALCULATOR])
        == template.prompt(messages)
        == (
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
            "assistant.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
        )
    )


def test_action_agent_lays_out_turns_as_agentflys_template():
    # AgentFly's action-agent: system and user text end with a newline before <|im_end|>; an
    # observation follows the assistant's turn as <observation>...</observation>, with no role
    template = get_template("action-agent")
    messages = [{"role": "system", "content": "Shop."}, {"role": "user", "content": "Buy boots."},
                {"role": "assistant", "content": "<action>search[boots]</action>"},
                {"role": "tool", "content": "Page 1"}]
    assert template.prompt(messages[:2]) == (
        "<|im_start|>system\nShop.\n<|im_end|>\n<|im_start|>user\nBuy boots.\n<|im_end|>\n"
        "<|im_start|>assistant\n")
    assert template.between_turns(messages) == "\n<observation>Page 1</observation>\n<|im_start|>assistant\n"
    assert template.between_turns(messages, closed=False) == (
        "<|im_end|>\n<observation>Page 1</observation>\n<|im_start|>assistant\n")


def test_stop_token_ids(tiny_tokenizer):
    for name in [*NAMED, None]:
        template = get_template(name, tiny_tokenizer)
        assert template.stop == ["<|im_end|>"]
        assert template.stop_token_ids(tiny_tokenizer) == [tiny_tokenizer.eos_token_id]


def test_model_template_refuses_a_template_that_rewrites_history(tiny_tokenizer):
    """A Qwen3-like template dropping the reasoning of earlier assistant turns."""
    tokenizer = copy.deepcopy(tiny_tokenizer)
    tokenizer.chat_template = (
        "{%- for m in messages %}{{ '<|im_start|>' + m.role + '\\n' }}"
        "{%- if m.role == 'assistant' and not loop.last %}{{ m.content.split('</think>')[-1] }}"
        "{%- else %}{{ m.content }}{%- endif %}{{ '<|im_end|>\\n' }}{%- endfor %}"
        "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}"
    )
    template = get_template("auto", tokenizer)
    assert isinstance(template, ModelTemplate) and template.end_of_turn == "<|im_end|>"
    plain = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    assert template.between_turns([*plain, {"role": "user", "content": "r"}]).endswith("assistant\n")
    thinking = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "<think>hmm</think>a"},
        {"role": "tool", "content": "r"},
    ]
    with pytest.raises(TemplateNotPrefixPreservingError, match="not prefix-preserving"):
        template.between_turns(thinking)


def test_registry_lookup_and_errors(tiny_tokenizer):
    assert set(NAMED) <= set(TEMPLATES.names())
    with pytest.raises(UnknownNameError, match=r"qwen2\.5"):
        get_template("qwen2.6")
    with pytest.raises(ValueError, match="tokenizer"):
        get_template(None)
    assert isinstance(get_template("model", tiny_tokenizer), ModelTemplate)
    with pytest.raises(ValueError, match="already registered"):
        register_template("qwen2.5", FormatTemplate(name="qwen2.5"))
    same = get_template("qwen2.5")
    assert register_template("qwen2.5", same) is same
    assert get_template(same) is same


def test_tiny_tokenizer_splits_digits_and_loads_alike(tiny_model_dir, tiny_tokenizer):
    from transformers import AutoTokenizer

    auto = AutoTokenizer.from_pretrained(tiny_model_dir)
    text = "<|im_start|>user\nWhat is 1234*(56-7)? hello world<|im_end|>\n"
    assert auto.encode(text) == tiny_tokenizer.encode(text)
    digits = tiny_tokenizer.convert_ids_to_tokens(tiny_tokenizer.encode(" 9081"))
    assert digits[-4:] == ["9", "0", "8", "1"]
    assert tiny_tokenizer.decode(tiny_tokenizer.encode(text)) == text
