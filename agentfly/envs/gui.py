"""A synthetic GUI: a small screen of buttons, shapes and a text field, drawn with Pillow.

The task row's ``screen`` (made by :func:`agentfly.envs.gui_tasks.make_gui_tasks`) describes the
page, so an episode is the same every time::

    {"width": 112, "height": 112, "page_height": 168,
     "elements": [{"kind": "button", "label": "OK", "color": "blue", "box": [8, 4, 51, 23]},
                  {"kind": "shape", "shape": "circle", "color": "red", "box": [70, 30, 89, 49]},
                  {"kind": "field", "box": [8, 60, 103, 79]}],
     "target": 0, "text": null, "goal": "Click the button labelled OK."}

Boxes are ``[x1, y1, x2, y2]`` in page pixels, both corners inside. The screen shows the page's
rows ``scroll .. scroll + height``; a page taller than the screen scrolls by half a screen.

Actions (text; AgentFly's UI-TARS form or a plain one, :func:`agentfly.envs.ui_actions.read_action`):
``click(start_box='(x,y)')`` or ``click(x, y)`` at screen pixel ``(x, y)`` (a box: its centre);
``type(content='...')`` or ``type(text)`` into the text field that has focus (a click on it gives
it focus); ``scroll(direction='down')`` or ``scroll(up)``. Every step answers with the new
screenshot (PNG bytes, ``StepResult.images``); ``reset`` gives the first under
``info["images"]``.

Reward: 1.0 on the click inside the target's box that completes the goal (for a form: the text
field holds the row's ``text``), and the episode ends; 0 otherwise. A click elsewhere, an
action the screen does not take or one that cannot be read is an observation saying so; the
episode goes on (``max_steps`` truncates it).
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

from agentfly.envs.base import Env, EnvUnavailable, EnvUsageError, StepResult, register_env, require
from agentfly.envs.ui_actions import UIAction, read_action

COLORS: dict[str, tuple[int, int, int]] = {
    "red": (214, 39, 40), "green": (44, 160, 44), "blue": (31, 119, 180),
    "orange": (255, 127, 14), "purple": (148, 103, 189), "gray": (127, 127, 127),
}
"""The colours elements are drawn in, by the name goals use."""
SHAPES = ("circle", "square", "triangle")
BACKGROUND = (245, 245, 245)
FIELD_OUTLINE, FOCUS_OUTLINE, INK = (90, 90, 90), (31, 119, 180), (20, 20, 20)
ACTIONS_HELP = "click(x, y), type(text) or scroll(up|down)"


def _pil() -> Any:
    try:
        from PIL import Image, ImageDraw, ImageFont
    except ImportError as e:
        raise EnvUnavailable(f"the gui environment draws its screens with Pillow ({e}): pip install pillow") from e
    return Image, ImageDraw, ImageFont


def describe(element: Mapping[str, Any]) -> str:
    """An element as goals and observations name it: ``the red circle``, ``the button labelled OK``."""
    if element["kind"] == "button":
        return f"the button labelled {element['label']}"
    if element["kind"] == "shape":
        return f"the {element['color']} {element['shape']}"
    return "the text field"


def render(spec: Mapping[str, Any], scroll: int = 0, focus: int | None = None,
           texts: Mapping[int, str] | None = None) -> Any:
    """The screen of ``spec`` scrolled by ``scroll`` pixels, as a Pillow RGB image
    (``width`` x ``height``); ``focus`` is the index of the field with focus, ``texts`` what
    each field holds."""
    image_mod, draw_mod, font_mod = _pil()
    width, height, page_height = spec["width"], spec["height"], spec.get("page_height", spec["height"])
    page = image_mod.new("RGB", (width, page_height), BACKGROUND)
    draw = draw_mod.Draw(page)
    font = font_mod.load_default()
    texts = texts or {}
    for index, element in enumerate(spec["elements"]):
        x1, y1, x2, y2 = element["box"]
        kind = element["kind"]
        if kind == "button":
            draw.rectangle((x1, y1, x2, y2), fill=COLORS[element["color"]])
            _centred(draw, font, element["label"], (x1, y1, x2, y2), (255, 255, 255))
        elif kind == "shape":
            color = COLORS[element["color"]]
            if element["shape"] == "circle":
                draw.ellipse((x1, y1, x2, y2), fill=color)
            elif element["shape"] == "square":
                draw.rectangle((x1, y1, x2, y2), fill=color)
            else:
                draw.polygon([((x1 + x2) / 2, y1), (x2, y2), (x1, y2)], fill=color)
        else:  # a text field
            outline = FOCUS_OUTLINE if focus == index else FIELD_OUTLINE
            draw.rectangle((x1, y1, x2, y2), fill=(255, 255, 255), outline=outline, width=1)
            draw.text((x1 + 3, y1 + 3), texts.get(index, ""), fill=INK, font=font)
    return page.crop((0, scroll, width, scroll + height))


def render_png(spec: Mapping[str, Any], scroll: int = 0, focus: int | None = None,
               texts: Mapping[int, str] | None = None) -> bytes:
    """:func:`render` as PNG bytes."""
    buffer = io.BytesIO()
    render(spec, scroll, focus, texts).save(buffer, format="PNG")
    return buffer.getvalue()


def _centred(draw: Any, font: Any, text: str, box: tuple[int, int, int, int], fill: tuple[int, int, int]) -> None:
    left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
    x = (box[0] + box[2] + 1 - (right - left)) / 2 - left
    y = (box[1] + box[3] + 1 - (bottom - top)) / 2 - top
    draw.text((x, y), text, fill=fill, font=font)


def check_screen(spec: Any) -> dict[str, Any]:
    """``spec`` if it describes a screen (see the module docstring), else an :class:`EnvUsageError`
    saying what is wrong."""
    if not isinstance(spec, Mapping):
        raise EnvUsageError(f"gui: the row's 'screen' is a mapping, got {type(spec).__name__}")
    for key in ("width", "height", "elements", "target"):
        require(spec, key, "gui (the row's screen)")
    elements = spec["elements"]
    if not isinstance(elements, list) or not 0 <= spec["target"] < len(elements):
        raise EnvUsageError(f"gui: the screen's target {spec['target']!r} names none of its {len(elements)} elements")
    for element in elements:
        kind = element.get("kind")
        if kind not in ("button", "shape", "field") or len(element.get("box", ())) != 4:
            raise EnvUsageError(f"gui: an element is a button, shape or field with a 4-number box, got {element!r}")
    if spec.get("page_height", spec["height"]) < spec["height"]:
        raise EnvUsageError("gui: the screen's page_height is less than its height")
    return dict(spec)


@register_env("gui")
class GUIEnv(Env):
    """One screen per episode, from the row's ``screen``.

    Args:
        max_steps: steps after which an episode is truncated.
    """

    def __init__(self, max_steps: int | None = 10) -> None:
        super().__init__(max_steps=max_steps)
        _pil()
        self.spec: dict[str, Any] = {}
        self.scroll = 0
        self.focus: int | None = None
        self.texts: dict[int, str] = {}

    def screenshot(self) -> bytes:
        """The current screen as PNG bytes."""
        return render_png(self.spec, self.scroll, self.focus, self.texts)

    def _reset(self, task: dict[str, Any], seed: int | None) -> tuple[str, dict[str, Any]]:
        self.spec = check_screen(require(task, "screen", self.name))
        self.scroll, self.focus, self.texts = 0, None, {}
        goal = str(self.spec.get("goal") or task.get("goal") or "")
        width, height = self.spec["width"], self.spec["height"]
        observation = f"{goal} The screen is {width}x{height} pixels; the actions are {ACTIONS_HELP}."
        return observation, {"goal": goal, "width": width, "height": height, "images": [self.screenshot()]}

    def _step(self, action: str) -> StepResult:
        parsed = read_action(action)
        if parsed is None:
            result = StepResult(f"Error: cannot read the action {action!r}; the actions are {ACTIONS_HELP}.")
        elif parsed.action_type == "click":
            result = self._click(parsed)
        elif parsed.action_type == "type":
            result = self._type(str(parsed.inputs.get("content", "")))
        elif parsed.action_type == "scroll":
            result = self._scroll(str(parsed.inputs.get("direction", "")))
        else:
            result = StepResult(f"Error: this screen takes {ACTIONS_HELP}; got {parsed.raw_type}.")
        result.info.setdefault("scroll", self.scroll)
        result.images = [self.screenshot()]
        return result

    def _click(self, action: UIAction) -> StepResult:
        point = action.point
        if point is None:
            return StepResult(f"Error: a click needs a point, as in click(x, y); the actions are {ACTIONS_HELP}.")
        x, y = point
        width, height = self.spec["width"], self.spec["height"]
        if not (0 <= x < width and 0 <= y < height):
            return StepResult(f"Error: ({x:g}, {y:g}) is outside the {width}x{height} screen.")
        hit = self._element_at(x, y + self.scroll)
        if hit is None:
            return StepResult(f"Clicked ({x:g}, {y:g}): nothing is there.")
        element = self.spec["elements"][hit]
        if element["kind"] == "field":
            self.focus = hit
        if hit != self.spec["target"]:
            what = "it has focus" if element["kind"] == "field" else "that is not what the task asks"
            return StepResult(f"Clicked {describe(element)}; {what}.")
        wanted = self.spec.get("text")
        held = next((t for i, t in self.texts.items() if i != hit), "")
        if wanted is not None and held != wanted:
            return StepResult(f"Clicked {describe(element)}, but the text field holds {held!r}, not what the task asks.")
        return StepResult(f"Clicked {describe(element)}: the task is done.", reward=1.0, terminated=True,
                          info={"won": True})

    def _type(self, text: str) -> StepResult:
        if self.focus is None:
            return StepResult("Error: no text field has focus; click one first.")
        text = text.removesuffix("\\n").removesuffix("\n")
        self.texts[self.focus] = self.texts.get(self.focus, "") + text
        return StepResult(f"Typed {text!r}; the text field holds {self.texts[self.focus]!r}.")

    def _scroll(self, direction: str) -> StepResult:
        direction = direction.strip().lower()
        if direction not in ("up", "down"):
            return StepResult(f"Error: this screen scrolls up or down, not {direction!r}.")
        height = self.spec["height"]
        bottom = self.spec.get("page_height", height) - height
        step = height // 2 if direction == "down" else -(height // 2)
        scroll = min(max(self.scroll + step, 0), bottom)
        if scroll == self.scroll:
            return StepResult(f"Scrolled {direction}: the page is already at the {'bottom' if direction == 'down' else 'top'}.")
        moved, self.scroll = abs(scroll - self.scroll), scroll
        return StepResult(f"Scrolled {direction}: the page moved {moved} pixels.")

    def _element_at(self, x: float, page_y: float) -> int | None:
        """The last-drawn element whose box holds the page point, or None."""
        for index in reversed(range(len(self.spec["elements"]))):
            x1, y1, x2, y2 = self.spec["elements"][index]["box"]
            if x1 <= x <= x2 and y1 <= page_y <= y2:
                return index
        return None
