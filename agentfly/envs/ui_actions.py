"""GUI actions as text: AgentFly's UI-TARS action parser, and the looser forms the GUI environment
also reads.

:func:`parse_actions` reads a response the way AgentFly's
``parse_action_to_structure_output`` (``src/agentfly/utils/ui_action_parser.py``) does with
``model_type="default"``, the mode its ``gui_reward`` uses: coordinates stay in pixels. A
response is ``Thought: ...`` then ``Action: <call>``, the call in Python syntax with keyword
arguments::

    Thought: The OK button is at the bottom.
    Action: click(start_box='<|box_start|>(48,80)<|box_end|>')

    type(content='hello')            scroll(direction='down')         hotkey(key='ctrl c')
    drag(start_box='(1,2)', end_box='(3,4)')                           finished(content='done')

As in AgentFly: no ``Action:`` (or an empty text) reads as no action; ``<point>x y</point>`` is
``(x,y)``; ``point=``, ``start_point=`` and ``end_point=`` are ``start_box=``/``end_box=``;
actions after the first are split off at ``)`` followed by a blank line; a call that is not
Python (or has only positional arguments: they are dropped) gives an action without inputs or
none; a box whose numbers do not parse makes the whole response no action; a 2-number box is the
point ``(x, y, x, y)``; ``left_single``, ``left_double`` and ``right_single`` are ``click``s,
``press``/``keydown``/``release``/``keyup`` ``hotkey``s and ``select`` a ``drag``.

Departures: boxes are tuples of floats, not the string of a list AgentFly stores; the type as
written is kept (:attr:`UIAction.raw_type`, so a double click stays one downstream); a ``type``
call's content is read up to its last ``')`` instead of by AgentFly's regex substitution; a box
of other than 2 or 4 numbers is a bad box (AgentFly keeps it, and its reward then finds no
coordinates).

:func:`read_action` is the GUI environment's reader: the same, with ``Action:`` optional, plus
the plain forms ``click(x, y)``, ``type(text)`` and ``scroll(down)``.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any

Box = tuple[float, float, float, float]

NORMALIZED_TYPES = {
    "left_single": "click", "left_double": "click", "right_single": "click",
    "press": "hotkey", "keydown": "hotkey", "release": "hotkey", "keyup": "hotkey",
    "select": "drag",
}
"""AgentFly's action types that stand for another (its parser's normalisation)."""

_BOX_PARAMS = ("start_box", "end_box")
_POINT_TAG = re.compile(r"<point>(\d+)\s+(\d+)</point>")
_TYPE_CALL = re.compile(r"\s*type\(content='(.*)'\)?\s*", re.DOTALL)
_PLAIN_CLICK = re.compile(
    r"(click|left_single|left_double|right_single)\(\s*(-?\d+(?:\.\d+)?)\s*,\s*(-?\d+(?:\.\d+)?)\s*\)"
)
_PLAIN_TYPE = re.compile(r"type\((.*)\)", re.DOTALL)
_PLAIN_SCROLL = re.compile(r"scroll\(\s*['\"]?(\w+)['\"]?\s*\)")


@dataclass(frozen=True)
class UIAction:
    """One parsed GUI action.

    Attributes:
        action_type: the normalised type (``click``, ``type``, ``scroll``, ``hotkey``, ``drag``,
            ``finished``, ``hover``...).
        inputs: the call's keyword arguments; ``start_box``/``end_box`` as ``(x1, y1, x2, y2)``
            pixel floats, text values left-stripped, empty ones left out.
        raw_type: the type as written (``left_double``).
        thought: the ``Thought:`` text, if any.
        reflection: the ``Reflection:`` text, if any.
    """

    action_type: str
    inputs: dict[str, Any] = field(default_factory=dict)
    raw_type: str = ""
    thought: str | None = None
    reflection: str | None = None

    @property
    def point(self) -> tuple[float, float] | None:
        """The centre of ``start_box`` (where a click lands), or None without one."""
        box = self.inputs.get("start_box")
        if box is None:
            return None
        return (box[0] + box[2]) / 2, (box[1] + box[3]) / 2


def parse_actions(text: str | None) -> list[UIAction]:
    """The actions of a response, as AgentFly's parser reads them (module docstring); [] for none."""
    if not text:
        return []
    text = text.strip()
    if "<point>" in text:
        text = _POINT_TAG.sub(lambda m: f"({m.group(1)},{m.group(2)})", re.sub(r"\[EOS\]", "", text)).strip()
    text = text.replace("start_point=", "start_box=").replace("end_point=", "end_box=")
    text = text.replace("point=", "start_box=")
    thought, reflection = _thought(text)
    if "Action:" not in text:
        return []
    actions = []
    for call in text.split("Action: ")[-1].split(")\n\n"):
        parsed = _call(_closed(call))
        if parsed is None:
            continue
        name, kwargs = parsed
        inputs: dict[str, Any] = {}
        for key, value in kwargs.items():
            if value is None or value == "":
                continue
            if isinstance(value, str):
                value = value.lstrip()
            if isinstance(value, str) and key in _BOX_PARAMS:
                value = parse_box(value)
                if value is None:  # AgentFly: one bad box and the response has no action
                    return []
            inputs[key.strip()] = value
        kind = NORMALIZED_TYPES.get(name, name)
        actions.append(UIAction(kind, inputs, name, thought, reflection))
    return actions


def read_action(text: str) -> UIAction | None:
    """The GUI environment's reading of one action: AgentFly's form with or without
    ``Action:``, else ``click(x, y)``, ``type(text)`` or ``scroll(direction)``; None if none."""
    text = text.strip()
    found = parse_actions(text if "Action:" in text else f"Action: {text}")
    if found and _complete(found[0]):
        return found[0]
    call = text.split("Action:")[-1].strip()
    if m := _PLAIN_CLICK.fullmatch(call):
        x, y = float(m.group(2)), float(m.group(3))
        return UIAction(NORMALIZED_TYPES.get(m.group(1), m.group(1)), {"start_box": (x, y, x, y)}, m.group(1))
    if m := _PLAIN_SCROLL.fullmatch(call):
        return UIAction("scroll", {"direction": m.group(1)}, "scroll")
    if m := _PLAIN_TYPE.fullmatch(call):
        content = m.group(1).strip()
        if len(content) >= 2 and content[0] == content[-1] and content[0] in "'\"":
            content = content[1:-1]
        return UIAction("type", {"content": content}, "type")
    return found[0] if found else None


def _complete(action: UIAction) -> bool:
    needs = {"click": "start_box", "type": "content", "scroll": "direction"}.get(action.action_type)
    return needs is None or needs in action.inputs


def _thought(text: str) -> tuple[str | None, str | None]:
    if text.startswith("Reflection:"):
        pattern = r"Reflection: (.+?)Action_Summary: (.+?)(?=\s*Action: |$)"
    elif text.startswith("Action_Summary:"):
        pattern = r"Action_Summary: (.+?)(?=\s*Action: |$)"
    else:
        pattern = r"Thought: (.+?)(?=\s*Action: |$)"
    m = re.search(pattern, text, re.DOTALL)
    if m is None:
        return None, None
    if len(m.groups()) == 2:
        return m.group(2).strip(), m.group(1).strip()
    return m.group(1).strip(), None


def _closed(call: str) -> str:
    """The call with a closing parenthesis, a ``type`` call's quotes escaped (AgentFly's repair)."""
    if "type(content" in call and (m := _TYPE_CALL.fullmatch(call)):
        content = re.sub(r"(?<!\\)'", r"\\'", m.group(1))
        call = f"type(content='{content}')"
    call = call.strip()
    return call if call.endswith(")") else call + ")"


def _call(call: str) -> tuple[str, dict[str, Any]] | None:
    """``(function name, keyword constants)`` of a Python call expression, else None."""
    try:
        node = ast.parse(call.replace("\n", "\\n").lstrip(), mode="eval").body
    except SyntaxError:
        return None
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    if name is None:
        return None
    kwargs = {kw.arg: kw.value.value if isinstance(kw.value, ast.Constant) else None
              for kw in node.keywords if kw.arg is not None}
    return name, kwargs


def parse_box(text: str) -> Box | None:
    """``"(x1,y1,x2,y2)"`` or ``"(x,y)"`` (box tokens allowed) as four floats, else None."""
    numbers = text.replace("<|box_start|>", "").replace("<|box_end|>", "")
    numbers = numbers.replace("(", "").replace(")", "").split(",")
    try:
        values = [float(n.strip()) for n in numbers]
    except ValueError:
        return None
    if len(values) == 2:
        values = values * 2
    if len(values) != 4:
        return None
    return values[0], values[1], values[2], values[3]


def read_turn(text: str) -> list[UIAction]:
    """A model's turn read as the ``gui`` agent reads it: :func:`parse_actions`, and a turn
    without ``Action:`` that names a click, type or scroll read again as if it began with it."""
    actions = parse_actions(text)
    if not actions and "Action:" not in text and any(w in text.lower() for w in ("click", "type", "scroll")):
        actions = parse_actions(f"Action: {text.strip()}")
    return actions

