"""GUI tools: AgentFly's ``pyautogui_code_generator`` and ``capture_screenshot``, and ``gui_step``.

``pyautogui_code_generator`` (AgentFly's ``tools/src/ui/tools.py``, the one tool of its GUI
training script) turns one action into PyAutoGUI code and acts on nothing: the action as the
model writes it (``click(start_box='(48,80)')``, read by
:func:`agentfly.envs.ui_actions.read_action`) or AgentFly's structured action (``action_type``,
``action_inputs``, ``thought``, as its GUI agent passes it), also as a JSON string. The code is
that of AgentFly's ``parsing_response_to_pyautogui_code`` for one action.

Departures from AgentFly: coordinates are the screenshot's pixels and go into the code as they
are (AgentFly's generator takes boxes as fractions of the screen and scales them to its 1920x1080
default); a double or right click stays one (AgentFly's parser turns them into ``click`` before
its generator sees them, so it never writes ``doubleClick``); typed text loses only a final
newline (AgentFly's ``rstrip("\\n")`` also strips trailing ``n`` and backslash characters); text is
quoted with ``repr``; the docstring block holds the thought only (AgentFly's also an empty
observation); a call without what it needs is an ``Error:`` observation.

``capture_screenshot`` and ``gui_step`` act on the chain's ``gui`` environment
(:mod:`agentfly.envs.gui`, reset with the chain's row): ``gui_step`` plays one action and shows
the new screen, ``capture_screenshot`` shows the current one without acting (AgentFly's
screenshots the machine's display with PyAutoGUI and returns the first 100 characters of its
base64). Both give the screen as PNG bytes in ``ToolResult.images``. ``gui_episode_reward``
scores the episode, ``gui_reward`` a single action against the row's ``gt_*`` fields.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from typing import Any

from agentfly.envs.ui_actions import NORMALIZED_TYPES, UIAction, parse_box, read_action
from agentfly.rollout.tools.base import ToolResult, tool
from agentfly.rollout.tools.environment import EnvSettings, act, env_failure, env_tool


@dataclasses.dataclass(frozen=True)
class GUISettings(EnvSettings):
    """The ``gui`` environment's settings (its deadlines and ``max_steps``)."""

    max_steps: int | None = 10
    start_timeout: float = 30.0
    reset_timeout: float = 10.0
    step_timeout: float = 10.0

    def environment_problem(self) -> str | None:
        if importlib.util.find_spec("PIL") is None:
            return "the gui environment draws its screens with Pillow: pip install pillow"
        return None


def _gui_tool(name: str):
    return env_tool(name=name, environment="gui", settings=GUISettings, timeout=60.0, max_resources=64)


@_gui_tool("gui_step")
def gui_step(action: str, resource) -> ToolResult:
    """Do one action on the screen and see the new screenshot: click(start_box='(x,y)') at
    pixel (x, y), type(content='text') into the text field that has focus, or
    scroll(direction='down') / scroll(direction='up').

    Args:
        action: the action, e.g. click(start_box='(48,80)').
    """
    return act(resource, action)


@_gui_tool("capture_screenshot")
def capture_screenshot(resource) -> ToolResult:
    """Capture a screenshot of the current screen."""
    try:
        images = resource.images()
    except Exception as e:  # the session's proxy broke: the environment's fault
        return env_failure(e)
    if not images:
        return ToolResult(observation="Error: the environment shows no screen.")
    return ToolResult(observation="The current screen.", images=images)


@tool(name="pyautogui_code_generator", runs_in="thread")  # string work: nothing to contain
def pyautogui_code_generator(action: str | dict[str, Any]) -> str:
    """Generate PyAutoGUI code from a GUI action.

    Args:
        action: the action, as written after 'Action:' (click(start_box='(x,y)'),
            type(content='...'), scroll(direction='down'), hotkey(key='ctrl c'), drag(...),
            finished(content='...')), or AgentFly's structured action (action_type,
            action_inputs, thought).
    """
    parsed = _as_action(action)
    if isinstance(parsed, str):
        return parsed
    if parsed.action_type in ("finished", "call_user"):
        return f"Task completed: {parsed.inputs.get('content', 'Task completed')}"
    code = to_pyautogui(parsed)
    return f"Generated PyAutoGUI code:\n{code}" if not code.startswith("Error") else code


def _as_action(action: Any) -> UIAction | str:
    """``action`` as a :class:`UIAction`, else an ``Error:`` message."""
    if isinstance(action, str):
        try:
            action = json.loads(action)
        except json.JSONDecodeError:
            found = read_action(action)
            return found if found is not None else f"Error: Invalid action format - {action}"
    if not isinstance(action, dict):
        return f"Error: Action must be a dictionary or an action string, got {type(action).__name__}"
    raw_type = str(action.get("action_type", ""))
    inputs = dict(action.get("action_inputs") or {})
    for key in ("start_box", "end_box"):
        if isinstance(inputs.get(key), str):  # AgentFly stores a box as the text of a list
            box = parse_box(inputs[key].replace("[", "(").replace("]", ")"))
            if box is None:
                return f"Error: Invalid {key} {inputs[key]!r}"
            inputs[key] = box
        elif isinstance(inputs.get(key), list | tuple):
            box = parse_box(",".join(map(str, inputs[key])))
            if box is None:
                return f"Error: Invalid {key} {inputs[key]!r}"
            inputs[key] = box
    return UIAction(NORMALIZED_TYPES.get(raw_type, raw_type), inputs, raw_type, action.get("thought"))


def _centre(box: tuple[float, float, float, float]) -> tuple[float, float]:
    return round((box[0] + box[2]) / 2, 3), round((box[1] + box[3]) / 2, 3)


def to_pyautogui(action: UIAction) -> str:
    """The PyAutoGUI code of one action (AgentFly's ``parsing_response_to_pyautogui_code``, with
    the departures in the module docstring), or an ``Error:`` message."""
    code = ["import pyautogui", "import time"]
    if action.thought:
        code += ["'''", "Thought:", action.thought, "'''"]
    kind, inputs = action.action_type, action.inputs
    if kind == "hotkey":
        keys = str(inputs.get("key", inputs.get("hotkey", "")))
        for arrow in ("left", "right", "up", "down"):
            keys = keys.replace(f"arrow{arrow}", arrow)
        if keys.split():
            code.append(f"pyautogui.hotkey({', '.join(repr(' ' if k == 'space' else k) for k in keys.split())})")
    elif kind == "type":
        content = str(inputs.get("content", ""))
        text = content.removesuffix("\\n").removesuffix("\n")
        if content:
            code += ["import pyperclip", f"pyperclip.copy({text!r})", "pyautogui.hotkey('ctrl', 'v')", "time.sleep(0.5)"]
            if content.endswith(("\n", "\\n")):
                code.append("pyautogui.press('enter')")
    elif kind == "drag":
        if "start_box" not in inputs or "end_box" not in inputs:
            return "Error: a drag needs start_box and end_box"
        (sx, sy), (ex, ey) = _centre(inputs["start_box"]), _centre(inputs["end_box"])
        code += [f"pyautogui.moveTo({sx}, {sy})", f"pyautogui.dragTo({ex}, {ey}, duration=1.0)"]
    elif kind == "scroll":
        direction = str(inputs.get("direction", "")).lower()
        amount = 5 if "up" in direction else -5 if "down" in direction else None
        if amount is None:
            code.append(f"# Unrecognized scroll direction: {direction!r}")
        elif "start_box" in inputs:
            x, y = _centre(inputs["start_box"])
            code.append(f"pyautogui.scroll({amount}, x={x}, y={y})")
        else:
            code.append(f"pyautogui.scroll({amount})")
    elif kind in ("click", "hover"):
        if "start_box" not in inputs:
            return f"Error: a {action.raw_type or kind} needs start_box"
        x, y = _centre(inputs["start_box"])
        code.append({
            "left_double": f"pyautogui.doubleClick({x}, {y}, button='left')",
            "right_single": f"pyautogui.click({x}, {y}, button='right')",
            "hover": f"pyautogui.moveTo({x}, {y})",
        }.get(action.raw_type, f"pyautogui.click({x}, {y}, button='left')"))
    else:
        code.append(f"# Unrecognized action type: {action.raw_type or kind}")
    return "\n".join(code)
