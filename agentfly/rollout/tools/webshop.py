"""``webshop_browser_action``: the WebShop environment tool of AgentFly's commands, not shipped here.

WebShop needs its own server and product index. The tool is registered so that AgentFly's
command parses and runs; every call answers that the environment is not available, and the
matching ``webshop_reward`` reports the same as a counted reward failure.
"""

from __future__ import annotations

from agentfly.rollout.tools.base import ToolResult, tool

NOT_AVAILABLE = (
    "The WebShop environment is not available in this installation of agentfly "
    "(it needs a WebShop server); no action was taken."
)


@tool(name="webshop_browser_action")
def webshop_browser_action(action: str) -> ToolResult:
    """Take one action in the WebShop web environment (search[...] or choose[...]).

    Args:
        action: the action, e.g. ``search[red running shoes]`` or ``choose[Buy Now]``.
    """
    return ToolResult.failure("not_available", NOT_AVAILABLE)
