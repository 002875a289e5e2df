"""The ``gui`` agent (AgentFly's ``GUIAgent``): a ``Thought:``/``Action:`` turn on a screenshot.

The model sees the screen (an image in the user message, and after each step the new screenshot
in the tool's message) and answers in UI-TARS' format::

    Thought: the OK button is at the bottom left.
    Action: click(start_box='(30,90)')

The turn is read as AgentFly's GUI agent reads it: :func:`agentfly.envs.ui_actions.parse_actions`
(AgentFly's ``parse_action_to_structure_output``), and a response without ``Action:`` that
names a click, type or scroll is read again as if it began with ``Action:``. The first action
becomes a call of the agent's first tool with the action's text, ``{"action": "click(...)"}``:

- an environment tool (``gui_step`` on :mod:`agentfly.envs.gui`): the action is played, the new
  screenshot comes back and the chain goes on until the episode ends;
- ``pyautogui_code_generator`` (AgentFly's GUI script): one turn, as in AgentFly, whose agent
  marks every turn terminal; the turn's text is the chain's answer, which ``gui_reward`` scores
  against the row's ``gt_action``/``gt_bbox``. The generated code is never shown to the model
  there either, so the tool is not run.

Departure from AgentFly: a turn with no readable action is no call (the chain ends with
``no_tool_call`` and its reward scores it), where AgentFly invents a click at the centre of a
1920×1080 screen; coordinates are the screenshot's pixels (the system prompt says so, as
AgentFly's does).
"""

from __future__ import annotations

from agentfly.envs.ui_actions import read_turn
from agentfly.rollout.agents.base import Agent, ParsedTurn, ToolCallRequest, register_agent

SYSTEM_PROMPT = """You are a GUI automation agent. Given a task and screenshot, you must analyze the screen and perform the next action.

## Response Format (REQUIRED)
You MUST always respond with exactly two lines:
Thought: [Describe what you see and what action to take]
Action: [Choose ONE action from the list below]

## Action Space

click(start_box='(x,y)')
type(content='xxx') # Use escape characters \\', \\", and \\n in content part
scroll(direction='down or up')

## Examples
Example 1:
Thought: I need to click on the search button at coordinates (100, 200).
Action: click(start_box='(100,200)')

Example 2:
Thought: I need to type "hello world" in the text field.
Action: type(content='hello world')

## Note
- Use English in `Thought` and `Action` part
- Always provide both Thought and Action lines
- Coordinates are pixels of the screenshot"""

ONE_TURN_TOOLS = ("pyautogui_code_generator",)


@register_agent("gui")
class GUIAgent(Agent):
    """AgentFly's GUI agent type: see the module docstring."""

    def default_system_prompt(self) -> str | None:
        return SYSTEM_PROMPT

    def parse(self, text: str) -> ParsedTurn:
        actions = read_turn(text)
        body = text.split("Action:")[-1].strip() if "Action:" in text else text.strip()
        if not actions or not self.tools:
            return ParsedTurn()
        tool = self.tools[0].name
        if tool in ONE_TURN_TOOLS:
            return ParsedTurn(answer=text)
        return ParsedTurn(calls=[ToolCallRequest(tool, {"action": body.split("\n\n")[0].strip()})])

    def write_calls(self, calls: list[ToolCallRequest]) -> str:
        """One call as its ``Action:`` line (the parser reads a turn's first action).

        Raises:
            ValueError: several calls, or a call without an ``action`` argument.
        """
        if len(calls) != 1:
            raise ValueError(f"a gui turn holds one action; got {len(calls)} calls")
        args = calls[0].arguments
        if not isinstance(args, dict) or "action" not in args:
            raise ValueError(f"a gui turn writes action=...; got {args!r}")
        return f"Action: {args['action']}"
