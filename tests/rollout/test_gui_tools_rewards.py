"""AgentFly's UI action parser, the GUI tools and the vision-language rewards, on hand cases.

Expected rewards are worked out by hand from the formulas in
:mod:`agentfly.rollout.rewards.gui_rewards` (``0.8 * accuracy + 0.2 * format``, accuracy
``0.5 * type + 0.5 * parameter``)."""

from __future__ import annotations

import io
import json
import math

import pytest

pytest.importorskip("PIL")
from PIL import Image

from agentfly.core.trajectory import Trajectory
from agentfly.envs.ui_actions import parse_actions, read_action
from agentfly.rollout.rewards import get_reward
from agentfly.rollout.rewards.gui_rewards import (
    gui_episode_reward,
    gui_point_reward,
    gui_reward,
    gui_token_f1,
    infoseek_reward,
    ok_vqa_reward,
)
from agentfly.rollout.tools import ToolResult, get_tool
from agentfly.rollout.tools.environment import EnvSession
from agentfly.rollout.tools.gui import (
    GUISettings,
    capture_screenshot,
    gui_step,
    pyautogui_code_generator,
)

CIRCLE = [70, 30, 89, 49]


# ------------------------------------------------------------------------- the parser


def test_parser_reads_agentfly_actions():
    (click,) = parse_actions("Thought: Click button.\nAction: click(start_box='<|box_start|>(100,200)<|box_end|>')")
    assert (click.action_type, click.raw_type, click.thought) == ("click", "click", "Click button.")
    assert click.inputs["start_box"] == (100.0, 200.0, 100.0, 200.0) and click.point == (100.0, 200.0)
    (double,) = parse_actions("Action: left_double(start_box='(10,20,30,40)')")
    assert (double.action_type, double.raw_type, double.point) == ("click", "left_double", (20.0, 30.0))
    (typed,) = parse_actions("Thought: t\nAction: type(content='it's fine')")
    assert typed.inputs == {"content": "it's fine"}
    (point,) = parse_actions("Action: click(point='<point>5 6</point>')")
    assert point.inputs["start_box"] == (5.0, 6.0, 5.0, 6.0)
    assert parse_actions("Action: press(key='enter')")[0].action_type == "hotkey"
    assert parse_actions("Action: select(start_box='(1,2)', end_box='(3,4)')")[0].action_type == "drag"
    two = parse_actions("Action: click(start_box='(1,2)')\n\ntype(content='x')")
    assert [a.action_type for a in two] == ["click", "type"]
    (reflected,) = parse_actions("Reflection: r Action_Summary: s\nAction: scroll(direction='up')")
    assert (reflected.reflection, reflected.thought, reflected.inputs) == ("r", "s", {"direction": "up"})


@pytest.mark.parametrize("text", [
    "", None, "This is not a valid action format", "click(start_box='(1,2)')",  # no "Action:"
    "Action: click(start_box='(abc,1)')",  # a bad box: AgentFly reads no action at all
    "Action: not python ((",
])
def test_parser_reads_no_action(text):
    assert parse_actions(text) == []


def test_environment_reader_takes_plain_forms_too():
    assert read_action("click(30, 40)").point == (30.0, 40.0)
    assert read_action("right_single(3, 4)").raw_type == "right_single"
    assert read_action("scroll(down)").inputs == {"direction": "down"}
    assert read_action("type(hello there)").inputs == {"content": "hello there"}
    assert read_action("type('quoted')").inputs == {"content": "quoted"}
    assert read_action("click(start_box='(8,9)')").point == (8.0, 9.0)
    assert read_action("wave hands") is None


# ------------------------------------------------------------------------- gui_reward


@pytest.mark.parametrize(("prediction", "expected"), [
    ("Thought: the circle.\nAction: click(start_box='(80,40)')", 1.0),   # type, in box, format
    ("Action: click(start_box='(70,30)')", 1.0),                         # a corner counts
    ("Action: left_single(start_box='(60,30,100,50)')", 1.0),            # a box: its centre 80,40
    ("Action: click(start_box='(69,40)')", 0.8 * 0.5 + 0.2),             # one pixel left of it
    ("Action: scroll(direction='down')", 0.2),                           # wrong type: format only
    ("Action: scroll(start_box='(80,40)', direction='down')", 0.2),      # its box earns nothing
    ("I would click the red circle", 0.0),                               # no Action: no format
    ("Action: click(start_box='(a,b)')", 0.0),
])
def test_gui_reward_on_a_click_row(prediction, expected):
    out = gui_reward(prediction, gt_action="click", gt_bbox=CIRCLE, gt_input_text="no input text")
    assert out["reward"] == pytest.approx(expected)


def test_gui_reward_parts_and_other_actions():
    out = gui_reward("Action: click(start_box='(69,40)')", gt_action="click", gt_bbox=CIRCLE)
    assert out == {"reward": pytest.approx(0.6), "format": 1.0, "accuracy": 0.5, "action_match": 1.0}
    # scroll: direction compared case aside, "down" when none is given
    assert gui_reward("Action: scroll(direction='DOWN')", "scroll", [], "down")["reward"] == 1.0
    assert gui_reward("Action: scroll()", "scroll", [], "down")["reward"] == 1.0
    assert gui_reward("Action: scroll(direction='up')", "scroll", [], "down")["reward"] == pytest.approx(0.6)
    # type: token-set F1 >= 0.5; "hello there friend" vs "hello world": P 1/3, R 1/2, F1 0.4
    assert gui_reward("Action: type(content='Hello, world!')", "type", [], "hello world")["reward"] == 1.0
    assert gui_reward("Action: type(content='hello')", "type", [], "hello world")["reward"] == 1.0  # F1 2/3
    assert gui_reward("Action: type(content='hello there friend')", "type", [], "hello world")["reward"] == pytest.approx(0.6)
    assert gui_token_f1("hello there friend", "hello world") == pytest.approx(0.4)
    # a click row without a box takes any click; a hotkey row gives only the type half
    assert gui_reward("Action: click(start_box='(1,1)')", "left_single", [])["reward"] == 1.0
    assert gui_reward("Action: hotkey(key='ctrl c')", "hotkey", [], "ctrl c")["reward"] == pytest.approx(0.6)


def test_gui_reward_reads_the_last_assistant_turn_when_the_prediction_is_empty():
    chain = [{"role": "user", "content": "go"},
             {"role": "assistant", "content": [{"type": "text", "text": "Action: click(start_box='(80,40)')"}]}]
    assert gui_reward("", "click", CIRCLE, trajectory=chain)["reward"] == 1.0
    assert gui_reward("", "click", CIRCLE)["reward"] == 0.0


def test_gui_reward_without_ground_truth_fails():
    with pytest.raises(ValueError, match="gt_action"):
        gui_reward("Action: click(start_box='(1,1)')")


def test_gui_point_reward_is_one_inside_the_box_and_a_gaussian_of_the_distance_outside():
    """Box [18, 4, 37, 23]: 20 x 20 pixels, centre (27.5, 13.5); outside, exp(-(dx² / 2w² + dy² / 2h²))."""
    box = [18, 4, 37, 23]
    assert gui_point_reward("Action: click(start_box='(37,23)')", box) == {"reward": 1.0, "acc": 1.0}  # edge
    below = gui_point_reward("Action: click(start_box='(27,41)')", box)  # dx -0.5, dy 27.5
    assert below["acc"] == 0.0 and below["reward"] == pytest.approx(math.exp(-(0.25 + 756.25) / 800))
    beside = gui_point_reward("Action: click(start_box='(83,13)')", box)  # dx 55.5, dy -0.5: a column over
    assert beside["reward"] == pytest.approx(math.exp(-(3080.25 + 0.25) / 800))
    assert beside["reward"] < below["reward"] < 1.0
    # a wide box [0, 0, 39, 9] (40 x 10, centre (19.5, 4.5)) spreads 40 across and 10 down
    wide = gui_point_reward("Action: click(start_box='(20,30)')", [0, 0, 39, 9])["reward"]
    assert wide == pytest.approx(math.exp(-(0.25 / 3200 + 650.25 / 200)))
    for no_click in ("Action: scroll(direction='down')", "Action: type(content='hi')", "I would click it"):
        assert gui_point_reward(no_click, box) == {"reward": 0.0, "acc": 0.0}
    with pytest.raises(ValueError, match="gt_bbox"):
        gui_point_reward("Action: click(start_box='(1,1)')", [])
    # a chain: its first turn's action is scored (gt_bbox is on the first screen), not the answer
    chain = Trajectory(prompt_ids=[0], messages=[
        {"role": "user", "content": "Click the red circle."},
        {"role": "assistant", "content": "click(start_box='(27,41)')"},
        {"role": "tool", "content": "Clicked (27, 41): nothing is there."},
        {"role": "assistant", "content": "Action: click(start_box='(27,13)')"},
    ])
    assert gui_point_reward("Clicked the red circle", box, chain) == below


def test_rewards_are_registered():
    for name, fn in (("gui_reward", gui_reward), ("ok_vqa_reward", ok_vqa_reward),
                     ("gui_point_reward", gui_point_reward),
                     ("infoseek_reward", infoseek_reward), ("gui_episode_reward", gui_episode_reward)):
        assert get_reward(name) is fn


# ------------------------------------------------------------------------- VQA rewards


def test_ok_vqa_reward():
    answers = ["red", "red", "red", "dark red", "maroon"]
    assert ok_vqa_reward("Red.", answers) == {"reward": 1.0, "f1": 1.0, "em": 1.0, "vqa_acc": 1.0}
    dark = ok_vqa_reward("dark red", answers)
    assert dark["reward"] == 1.0 and dark["vqa_acc"] == pytest.approx(1 / 3)
    assert ok_vqa_reward("blue", answers)["reward"] == 0.0
    # "red car" vs "red": precision 1/2, recall 1, F1 2/3; matches no answer exactly
    mixed = ok_vqa_reward("red car", ["red", "red", "car"])
    assert mixed["reward"] == pytest.approx(2 / 3) and mixed["vqa_acc"] == 0.0
    assert ok_vqa_reward("<answer>maroon</answer>", answers)["reward"] == 1.0


def test_infoseek_reward():
    answer_eval = ["Paris", "City of Paris", {"range": [1, 2]}]
    two_calls = [{"role": "tool", "content": "a"}, {"role": "tool", "content": "b"}]
    one_call = two_calls[:1]
    assert infoseek_reward("paris", "Paris", answer_eval, two_calls)["reward"] == pytest.approx(1.0)
    assert infoseek_reward("paris", "Paris", answer_eval, one_call)["reward"] == pytest.approx(0.8)
    # "the city" -> "city" vs "city of paris": precision 1, recall 1/3, F1 1/2
    assert infoseek_reward("the city", "Paris", answer_eval, two_calls)["reward"] == pytest.approx(0.2 + 0.8 * 0.5)
    assert infoseek_reward("paris", ["Lyon", "Paris"], None, None)["reward"] == pytest.approx(0.8)


# ------------------------------------------------------------------------- tools


@pytest.mark.parametrize(("action", "line"), [
    ("click(start_box='(10,20)')", "pyautogui.click(10.0, 20.0, button='left')"),
    ("left_double(start_box='(4,6)')", "pyautogui.doubleClick(4.0, 6.0, button='left')"),
    ("right_single(start_box='(4,6,8,10)')", "pyautogui.click(6.0, 8.0, button='right')"),
    ("hotkey(key='ctrl c')", "pyautogui.hotkey('ctrl', 'c')"),
    ("hotkey(key='arrowup')", "pyautogui.hotkey('up')"),
    ("scroll(direction='down')", "pyautogui.scroll(-5)"),
    ("scroll(start_box='(2,4)', direction='up')", "pyautogui.scroll(5, x=2.0, y=4.0)"),
    ("drag(start_box='(0,0)', end_box='(10,10,20,20)')", "pyautogui.dragTo(15.0, 15.0, duration=1.0)"),
    ({"action_type": "click", "action_inputs": {"start_box": "[10, 20, 30, 40]"}, "thought": "t"},
     "pyautogui.click(20.0, 30.0, button='left')"),
    (json.dumps({"action_type": "hover", "action_inputs": {"start_box": "(5, 5)"}}), "pyautogui.moveTo(5.0, 5.0)"),
])
def test_pyautogui_code_generator(action, line):
    out = pyautogui_code_generator(action)
    assert out.startswith("Generated PyAutoGUI code:\nimport pyautogui\nimport time")
    assert line in out.splitlines()


def test_pyautogui_code_generator_types_and_ends():
    typed = pyautogui_code_generator("type(content='run\\n')").splitlines()
    # AgentFly's rstrip("\\n") would have left 'ru'
    assert "pyperclip.copy('run')" in typed and typed[-1] == "pyautogui.press('enter')"
    assert pyautogui_code_generator("finished(content='done')") == "Task completed: done"
    assert pyautogui_code_generator("wave hands").startswith("Error")
    assert pyautogui_code_generator("click()").startswith("Error")
    assert get_tool("pyautogui_code_generator") is pyautogui_code_generator


def test_gui_tools_show_the_screen(tmp_path):
    from agentfly.envs.gui_tasks import write_gui_tasks

    (row,) = write_gui_tasks(tmp_path / "tasks.json", 1, "train", 7)  # a shape task: click wins
    session = EnvSession("gui", GUISettings())
    try:
        session.start(row)
        shot = capture_screenshot(resource=session)
        assert isinstance(shot, ToolResult) and shot.ok
        assert shot.images == [(tmp_path / row["images"][0]).read_bytes()]  # the row's first screen
        x1, y1, x2, y2 = row["gt_bbox"]
        miss = gui_step(action="click(0, 0)", resource=session)
        assert miss.reward == 0.0 and not miss.ends_chain
        with Image.open(io.BytesIO(miss.images[0])) as image:
            assert image.size == (112, 112)
        won = gui_step(action=f"click(start_box='({(x1 + x2) // 2},{(y1 + y2) // 2})')", resource=session)
        assert won.reward == 1.0 and won.ends_chain and len(won.images) == 1
        assert capture_screenshot(resource=session).images == won.images
        record = session.record()
        json.dumps(record)  # no images in it
        assert "images" not in record["reset_info"]
        assert gui_episode_reward(type("T", (), {"environments": {"gui": record}})()) == {"reward": 1.0, "steps": 2.0}
    finally:
        session.close()
