"""The vision templates (``qwen2.5-vl``, ``qwen2.5-vl-system-tool``, ``qwen3-vl-instruct``): a GUI
conversation with a screenshot in the user turn and another in the tool result renders as written
out by hand below, which is also what chat-bricks 0.1.5 renders (the ``test`` extra installs it);
each image is one unexpanded ``<|vision_start|><|image_pad|><|vision_end|>`` where it stands.
Text-only templates refuse an image instead of dropping it.
"""

from __future__ import annotations

import copy

import pytest

from agentfly.core.errors import InputError
from agentfly.rollout.templates import ChatTemplate, get_template

IMG = "<|vision_start|><|image_pad|><|vision_end|>"
VISION = ["qwen2.5-vl", "qwen2.5-vl-system-tool", "qwen3-vl-instruct"]

CLICK = {
    "type": "function",
    "function": {
        "name": "click",
        "description": "Click at a point of the screen.",
        "parameters": {
            "type": "object",
            "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
            "required": ["x", "y"],
        },
    },
}
CALL = '<tool_call>\n{"name": "click", "arguments": {"x": 40, "y": 60}}\n</tool_call>'
MESSAGES = [
    {"role": "system", "content": "You operate a GUI."},
    {"role": "user", "content": [
        {"type": "image", "image": "screen0.png"},
        {"type": "text", "text": "Click the OK button."},
    ]},
    {"role": "assistant", "content": CALL},
    {"role": "tool", "content": [
        {"type": "image", "image": b"\x89PNG..."},
        {"type": "text", "text": "Clicked."},
    ]},
]

HERMES = (
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    '{"type": "function", "function": {"name": "click", "description": "Click at a point of the '
    'screen.", "parameters": {"type": "object", "properties": {"x": {"type": "integer"}, "y": '
    '{"type": "integer"}}, "required": ["x", "y"]}}}\n</tools>\n\nFor each function call, return '
    "a json object with function name and arguments within <tool_call></tool_call> XML tags:\n"
    '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)
USER_AND_CALL = (
    f"<|im_start|>user\n{IMG}Click the OK button.<|im_end|>\n"
    f"<|im_start|>assistant\n{CALL}<|im_end|>\n"
)
# Rendered with tools=[CLICK] and the generation prompt.
EXPECTED = {
    # no tool catalogue; the tool result is a ``tool`` turn
    "qwen2.5-vl": (
        "<|im_start|>system\nYou operate a GUI.<|im_end|>\n" + USER_AND_CALL
        + f"<|im_start|>tool\n{IMG}Clicked.<|im_end|>\n<|im_start|>assistant\n"
    ),
    "qwen2.5-vl-system-tool": (
        f"<|im_start|>system\nYou operate a GUI.{HERMES}<|im_end|>\n" + USER_AND_CALL
        + f"<|im_start|>tool\n{IMG}Clicked.<|im_end|>\n<|im_start|>assistant\n"
    ),
    # Qwen3's tool block after a blank line; the result in <tool_response> of a user turn
    "qwen3-vl-instruct": (
        "<|im_start|>system\nYou operate a GUI.\n\n" + HERMES.removeprefix("\n\n") + "<|im_end|>\n"
        + USER_AND_CALL
        + f"<|im_start|>user\n<tool_response>\n{IMG}Clicked.\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    ),
}


@pytest.mark.parametrize("name", VISION)
def test_gui_conversation_renders_as_written_by_hand(name):
    assert get_template(name).prompt(MESSAGES, [CLICK]) == EXPECTED[name]


@pytest.mark.parametrize("name", VISION)
def test_chat_bricks_renders_the_same(name):
    cb = pytest.importorskip("chat_bricks")
    rendered = cb.get_template(name).render(copy.deepcopy(MESSAGES), tools=[CLICK],
                                            add_generation_prompt=True)[0]
    assert rendered == EXPECTED[name]


@pytest.mark.parametrize("name", VISION)
def test_images_stand_where_they_are_in_the_content(name):
    content = [
        {"type": "text", "text": "Before "},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        {"type": "text", "text": " between "},
        {"type": "image"},
    ]
    text = get_template(name).prompt([{"role": "user", "content": content}])
    assert f"Before {IMG} between {IMG}<|im_end|>\n" in text
    assert text.count("<|image_pad|>") == 2  # one pad per image, not expanded


@pytest.mark.parametrize("name", VISION)
def test_text_between_turns_carries_the_tool_screenshot(name):
    template = get_template(name)
    assert template.prefix_preserving
    between = template.between_turns(MESSAGES, [CLICK])
    assert between == ChatTemplate.between_turns(template, MESSAGES, [CLICK])
    assert EXPECTED[name].endswith(CALL + "<|im_end|>" + between)
    assert between.count(IMG) == 1


@pytest.mark.parametrize("name", ["qwen2.5", "qwen3-instruct", "qwen2.5-think", "llama-3.2",
                                  "kimi-k2-instruct", "search-r1", "action-agent"])
def test_text_only_templates_refuse_an_image(name):
    template = get_template(name)
    with pytest.raises(InputError, match=f"template '{name}' is text-only"):
        template.prompt(MESSAGES[:2])
    messages = [{"role": "user", "content": "go"}, {"role": "assistant", "content": "ok"},
                MESSAGES[3]]
    with pytest.raises(ValueError, match=f"'{name}'.*tool message"):
        template.between_turns(messages)
    # text parts alone are still text
    text = [{"type": "text", "text": "Click "}, {"type": "text", "text": "OK."}]
    assert "Click OK." in template.prompt([{"role": "user", "content": text}])


@pytest.mark.parametrize(
    ("message", "match"),
    [
        ({"role": "system", "content": [{"type": "image"}]}, "user and tool messages only"),
        ({"role": "assistant", "content": [{"type": "image"}]}, "user and tool messages only"),
        ({"role": "user", "content": [{"type": "video", "video": "v.mp4"}]}, "type 'video'"),
        ({"role": "user", "content": [{"image": "untyped.png"}]}, "type None"),
    ],
)
def test_vision_templates_refuse_what_they_cannot_place(message, match):
    messages = [message] if message["role"] == "system" else [
        {"role": "user", "content": "hi"}, message]
    with pytest.raises(InputError, match=match):
        get_template("qwen2.5-vl").render(messages)
