"""Tools the model can call: the ``@tool`` registry, the runner and the built-in tools.

Importing this package registers the built-ins: ``calculator``, ``answer``,
``code_interpreter`` (alias ``python_executor``) and ``search`` (alias ``google_search``).
Heavy dependencies (sympy, bm25s) are imported only when a tool first needs them. A tool's
settings are bound per run with ``tool.configure(...)`` (see :mod:`agentfly.rollout.tools.settings`).
"""

# Imported for their side effect: each module registers its tool.
from agentfly.rollout.tools import answer, calculator, code_interpreter, search, webshop  # noqa: F401
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
