"""The synthetic GUI environment: clicks in and out of boxes, typing, scrolling, its screenshots,
its task rows, and images through a process and an environment session.

Expected values come from a hand-made screen (boxes chosen here) and from invariants of the
generated rows (the centre of ``gt_bbox`` is a correct click)."""

from __future__ import annotations

import io
import json

import pytest

pytest.importorskip("PIL")
from PIL import Image

from agentfly.envs.base import StepResult, get_env
from agentfly.envs.gui import BACKGROUND, COLORS, GUIEnv, render
from agentfly.envs.gui_tasks import make_gui_tasks, make_screen, write_gui_tasks
from agentfly.envs.process import ProcessEnv

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def screen(target: int = 1, text: str | None = None) -> dict:
    """112x112 screen over a 168-pixel page: OK button, red circle, a text field, and a button
    below the first screen (page rows 130..149)."""
    return {
        "width": 112, "height": 112, "page_height": 168, "text": text, "target": target,
        "goal": "Do the thing.",
        "elements": [
            {"kind": "button", "label": "OK", "color": "blue", "box": [8, 4, 51, 23]},
            {"kind": "shape", "shape": "circle", "color": "red", "box": [70, 30, 89, 49]},
            {"kind": "field", "box": [8, 60, 103, 79]},
            {"kind": "button", "label": "Far", "color": "green", "box": [8, 130, 51, 149]},
        ],
    }


def opened(png: bytes) -> Image.Image:
    assert png.startswith(PNG_MAGIC)
    image = Image.open(io.BytesIO(png))
    image.load()
    assert image.format == "PNG"
    return image


def play(spec: dict, *actions: str) -> list[StepResult]:
    env = GUIEnv(max_steps=None)
    env.reset({"screen": spec})
    return [env.step(a) for a in actions]


def test_registered_and_images_default_empty():
    assert get_env("gui") is GUIEnv
    assert StepResult("text").images == []


def test_click_inside_the_target_box_wins_and_outside_does_not():
    # the circle's box is x 70..89, y 30..49, edges included
    for action in ("click(80, 40)", "click(70, 30)", "click(89, 49)",
                   "Thought: the red circle.\nAction: click(start_box='<|box_start|>(80,40)<|box_end|>')",
                   "click(start_box='(60,30,100,50)')"):  # a box: its centre (80, 40)
        result = play(screen(target=1), action)[0]
        assert (result.reward, result.terminated) == (1.0, True), action
    for action in ("click(69, 40)", "click(90, 40)", "click(80, 29)", "click(80, 50)", "click(30, 14)"):
        result = play(screen(target=1), action)[0]
        assert (result.reward, result.terminated) == (0.0, False), action
    assert "nothing is there" in play(screen(), "click(60, 100)")[0].observation
    assert "the button labelled OK" in play(screen(), "click(30, 14)")[0].observation


def test_scroll_moves_the_page_by_half_a_screen():
    first, second, third, click = play(screen(target=3), "click(30, 80)", "scroll(down)",
                                       "scroll(direction='down')", "click(30, 80)")
    assert "nothing is there" in first.observation  # page row 80: between the field and Far
    assert second.info["scroll"] == 56 and "moved 56 pixels" in second.observation
    assert third.info["scroll"] == 56 and "already at the bottom" in third.observation
    assert (click.reward, click.terminated) == (1.0, True)  # screen row 80 is page row 136
    up = play(screen(), "scroll(up)")[0]
    assert up.info["scroll"] == 0 and "already at the top" in up.observation


def test_form_needs_the_text_before_the_submit_click():
    results = play(screen(target=0, text="cat"), "type(content='cat')", "click(30, 14)",
                   "click(50, 70)", "type(content='ca')", "type(t)", "click(30, 14)")
    no_focus, early, focus, typed, typed_more, done = results
    assert no_focus.observation.startswith("Error: no text field has focus")
    assert (early.reward, early.terminated) == (0.0, False) and "holds ''" in early.observation
    assert "it has focus" in focus.observation
    assert "holds 'ca'" in typed.observation and "holds 'cat'" in typed_more.observation
    assert (done.reward, done.terminated) == (1.0, True)


@pytest.mark.parametrize("action", [
    "", "dance", "click(", "click()", "click(500, 5)", "click(-1, 5)", "scroll(left)",
    "hotkey(key='ctrl c')", "Action: click(start_box='(x,y)')", "type(content='a')", "\x00\x01",
])
def test_a_malformed_action_is_an_observation(action):
    env = GUIEnv(max_steps=None)
    env.reset({"screen": screen()})
    result = env.step(action)
    assert result.observation.startswith("Error:"), result.observation
    assert (result.reward, result.terminated, result.truncated) == (0.0, False, False)
    opened(result.images[0])
    assert env.step("click(80, 40)").reward == 1.0  # the episode goes on


def test_max_steps_truncates():
    env = GUIEnv(max_steps=2)
    env.reset({"screen": screen()})
    assert not env.step("click(60, 100)").done
    assert env.step("click(60, 100)").truncated


def test_screenshot_pixels_follow_the_state():
    spec = screen()
    top = render(spec)
    assert top.size == (112, 112) and top.mode == "RGB"
    assert top.getpixel((80, 40)) == COLORS["red"]  # the circle's centre
    assert top.getpixel((2, 2)) == BACKGROUND
    assert top.getpixel((9, 5)) == COLORS["blue"]  # inside OK, left of its label
    scrolled = render(spec, scroll=56)
    assert scrolled.getpixel((9, 75)) == COLORS["green"]  # Far's page row 131
    assert scrolled.getpixel((80, 40)) == BACKGROUND  # the circle went up out of view
    assert render(spec, focus=2).getpixel((8, 60)) != top.getpixel((8, 60))  # focus outline


def test_every_step_returns_a_png_of_the_screen_size():
    spec = make_screen(5, width=168, height=140, kind="button")
    env = GUIEnv()
    _, info = env.reset({"screen": spec})
    assert opened(info["images"][0]).size == (168, 140)
    assert opened(env.step("scroll(down)").images[0]).size == (168, 140)


def test_rendering_is_deterministic_for_a_seed():
    assert make_screen(11) == make_screen(11)
    assert make_gui_tasks(8, "train", 3) == make_gui_tasks(8, "train", 3)
    a, b = GUIEnv(), GUIEnv()
    spec = make_screen(11)
    assert a.reset({"screen": spec})[1]["images"] == b.reset({"screen": spec})[1]["images"]
    assert make_screen(11) != make_screen(12)


def test_train_and_heldout_share_no_seed_nor_layout():
    train, heldout = make_gui_tasks(60, "train", 0), make_gui_tasks(60, "heldout", 0)
    assert not {r["seed"] for r in train} & {r["seed"] for r in heldout}
    layouts = [{json.dumps(r["screen"]["elements"]) for r in rows} for rows in (train, heldout)]
    assert not layouts[0] & layouts[1]
    assert len(layouts[0]) == 60  # no two train rows alike either
    with pytest.raises(ValueError, match="split"):
        make_gui_tasks(1, "test", 0)


def test_the_rows_first_action_is_a_correct_one():
    """Invariant: the centre of gt_bbox is a click that wins (forms: focuses the field), and a
    scroll row is won by scrolling down and clicking the target."""
    for row in make_gui_tasks(24, "train", 1):
        env = GUIEnv(max_steps=None)
        env.reset(row)
        spec = row["screen"]
        if row["gt_action"] == "scroll":
            assert row["gt_input_text"] == "down" and row["gt_bbox"] == []
            env.step("scroll(direction='down')")
            x1, y1, x2, y2 = spec["elements"][spec["target"]]["box"]
            result = env.step(f"click({(x1 + x2) // 2}, {(y1 + y2) // 2 - 56})")
            assert result.reward == 1.0, row["task_id"]
            continue
        x1, y1, x2, y2 = row["gt_bbox"]
        result = env.step(f"click({(x1 + x2) // 2}, {(y1 + y2) // 2})")
        if spec["text"] is None:
            assert result.reward == 1.0, row["task_id"]
        else:
            assert "it has focus" in result.observation
            env.step(f"type(content='{spec['text']}')")
            bx1, by1, bx2, by2 = spec["elements"][spec["target"]]["box"]
            assert env.step(f"click({(bx1 + bx2) // 2}, {(by1 + by2) // 2})").reward == 1.0


def test_a_locate_screen_holds_one_shape_in_one_of_the_eight_cells():
    """The ``locate`` kind: one shape, the goal naming it, its box centred in a 56x28 cell; over
    enough rows every one of the 2 x 4 cells is used, and the centre of gt_bbox wins."""
    rows = make_gui_tasks(64, "train", 3, kinds=("locate",))
    cells = set()
    for row in rows:
        (shape,) = row["screen"]["elements"]
        assert shape["kind"] == "shape" and row["goal"] == f"Click the {shape['color']} {shape['shape']}."
        x1, y1, x2, y2 = row["gt_bbox"]
        assert (x2 - x1, y2 - y1) == (19, 19) and x1 % 56 == 18 and y1 % 28 == 4
        cells.add((x1 // 56, y1 // 28))
        env = GUIEnv(max_steps=None)
        env.reset(row)
        assert env.step(f"click({(x1 + x2) // 2}, {(y1 + y2) // 2})").reward == 1.0
    assert cells == {(c, r) for c in range(2) for r in range(4)}
    with pytest.raises(ValueError, match="locate"):
        make_gui_tasks(1, "train", 0, kinds=("nowhere",))


def test_written_rows_show_resets_first_screen(tmp_path):
    path = tmp_path / "data" / "train.json"
    rows = write_gui_tasks(path, 4, "train", 0)
    assert json.loads(path.read_text()) == rows
    for row in rows:
        (image,) = row["images"]
        assert image == f"screens/{row['task_id']}.png"  # relative to the data file
        png = (path.parent / image).read_bytes()
        _, info = GUIEnv().reset(row)
        assert info["images"] == [png]
        assert opened(png).size == (112, 112)


def test_a_bad_screen_row_is_a_usage_error():
    from agentfly.envs.base import EnvUsageError

    with pytest.raises(EnvUsageError, match="screen"):
        GUIEnv().reset({"goal": "x"})
    with pytest.raises(EnvUsageError, match="target"):
        GUIEnv().reset({"screen": {**screen(), "target": 9}})


def test_images_cross_the_process_boundary():
    spec = screen()
    local = GUIEnv()
    _, local_info = local.reset({"screen": spec})
    expected_step = local.step("scroll(down)")
    with ProcessEnv.named("gui", {"max_steps": 5}, label="gui") as env:
        _, info = env.reset({"screen": spec})
        assert info["images"] == local_info["images"]
        step = env.step("scroll(down)")
        assert step.images == expected_step.images and len(step.images) == 1
