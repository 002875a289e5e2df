"""``summarize``: the tool behind the ``action`` agent's ``<summarize>...</summarize>`` (AgentFly's).

It answers ``[Previous Summary]: <summary>``. Departure from AgentFly: AgentFly then folds the
chain's history (drops the turns before the summary and trains on each segment apart); here the
chain goes on with its whole history, the summary shown as an observation.
"""

from __future__ import annotations

from agentfly.rollout.tools.base import tool


@tool(name="summarize", runs_in="thread", timeout=5.0)
def summarize(summary: str) -> str:
    """Summarize the progress so far; the summary is shown back.

    Args:
        summary: what was done and found so far.
    """
    return f"[Previous Summary]: {summary}"
