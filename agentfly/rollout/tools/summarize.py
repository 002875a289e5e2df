"""``summarize``: the tool behind the ``action`` agent's ``<summarize>...</summarize>`` (AgentFly's).

It answers ``[Previous Summary]: <summary>`` and folds the chain's history (``folds_context``):
the turns before it are dropped, the summary joins the question, and the next turn starts a new
training segment (:mod:`agentfly.rollout.folding`).
"""

from __future__ import annotations

from agentfly.rollout.tools.base import tool


@tool(name="summarize", runs_in="thread", timeout=5.0, folds_context=True)
def summarize(summary: str) -> str:
    """Summarize the progress so far; the history is replaced by the summary.

    Args:
        summary: what was done and found so far.
    """
    return f"[Previous Summary]: {summary}"
