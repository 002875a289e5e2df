"""Tools the model can call: the ``@tool`` registry, the runner and the built-in tools.

Importing this package registers the built-ins: ``calculator``, ``answer`` (and AgentFly's
``answer_math`` and ``answer_qa``), ``code_interpreter`` (alias ``python_executor``), ``search``
(alias ``google_search``), ``async_dense_retrieve`` (alias ``asyncdense_retrieve``),
``summarize``, and the environment tools with AgentFly's names (``webshop_browser_action``,
``webshop_browser``, ``scienceworld_explorer``, ``alfworld_step``, ``alfworld_reset``,
``alfworld_get_admissible_commands``, ``alfworld_get_task_objective``, ``chess_move``,
``chess_get_state``, ``chess_get_legal_moves``), ``textworld_step``
(:mod:`agentfly.rollout.tools.environment`), the GUI tools (:mod:`agentfly.rollout.tools.gui`:
AgentFly's ``pyautogui_code_generator`` and ``capture_screenshot``, and ``gui_step``), and the
SWE tools on a chain's workspace
(:mod:`agentfly.rollout.tools.workspace`: ``create_file``, ``read_file``, ``edit_file``,
``list_files``, ``grep_search``, ``run_python``, ``undo_edit``, ``run_shell_command``). Heavy dependencies (sympy, bm25s, an environment's
package) are imported only when a tool first needs them. A tool's
settings are bound per run with ``tool.configure(...)`` (see :mod:`agentfly.rollout.tools.settings`).
"""

# Imported for their side effect: each module registers its tool.
from agentfly.rollout.tools import (  # noqa: F401
    alfworld,
    answer,
    calculator,
    chess,
    code_interpreter,
    dense_retrieve,
    files,
    gui,
    scienceworld,
    search,
    shell,
    summarize,
    textworld,
    webshop,
)
from agentfly.rollout.tools.base import (
    TOOLS,
    Tool,
    ToolResult,
    ToolUnavailableError,
    get_tool,
    tool,
    tool_schemas,
)
from agentfly.rollout.tools.call import run_tool_call
from agentfly.rollout.tools.settings import ToolSettingsError, configure_tool

__all__ = [
    "TOOLS",
    "Tool",
    "ToolResult",
    "ToolSettingsError",
    "ToolUnavailableError",
    "configure_tool",
    "get_tool",
    "run_tool_call",
    "tool",
    "tool_schemas",
]
