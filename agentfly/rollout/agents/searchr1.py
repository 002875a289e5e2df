"""The ``searchr1`` agent (AgentFly's ``SearchR1Agent``; Search-R1, Jin et al., 2025,
https://arxiv.org/abs/2503.09516): ``<search> query </search>`` calls the ``search`` tool,
``<answer> ... </answer>`` ends the chain.

A turn is read as AgentFly reads it: only the text up to the first ``</search>`` or
``</answer>`` (lowercase, whichever closes first) counts. In it, the first
``<search>QUERY</search>`` (tags in either case) with a non-empty QUERY becomes a call of
``search`` with ``{"query": QUERY}``; further spans are dropped (one call per turn), empty ones
skipped. A turn without such a call ends the chain: with the text read as its final answer when
that text holds a closed ``<answer>`` span (so a QA reward scores the first answer, as
AgentFly's ``qa_em_reward`` does), else with no answer. ``<think>...</think>`` is free reasoning.

The agent does not wrap the search results: they come back as ``tool`` messages and the
template lays them out, as in AgentFly. The ``search-r1`` template writes
``<information>...</information>``; ``qwen3-think-no-tool`` (AgentFly's training script's) and
ChatML templates write a ``<tool_response>`` user turn, although the system prompt promises
``<information>``.

The type always reads turns with its own parser: AgentFly's script names
``tool_parser_name=hermes``, which its ``SearchR1Agent`` never consults.

Departures from AgentFly: the text sampled after the first closing tag stays in the trajectory
(it was sampled; AgentFly cuts it from the message it trains on and from the next turn's
context); the default system prompt is the one AgentFly's script passes on its command line.
"""

from __future__ import annotations

import re

from agentfly.rollout.agents.base import (
    Agent,
    ParsedTurn,
    ToolCallRequest,
    register_agent,
    single_call_argument,
)

SEARCH = re.compile(r"<search>\s*(.*?)\s*</search>", re.DOTALL | re.IGNORECASE)
ANSWER = re.compile(r"<answer>.*?</answer>", re.DOTALL | re.IGNORECASE)
CLOSING_TAGS = ("</search>", "</answer>")
SEARCH_TOOL = "search"

#: AgentFly's ``examples/train_scripts/search/train_search_r1.sh`` system prompt (Search-R1's).
SYSTEM_PROMPT = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first "
    "every time you get new information. After reasoning, if you find you lack some knowledge, "
    "you can call a search engine by <search> query </search> and it will return the top "
    "searched results between <information> and </information>. You can search as many times "
    "as your want. If you find no further external knowledge needed, you can directly provide "
    "the answer inside <answer> and </answer>, without detailed illustrations. For example, "
    "<answer> Beijing </answer>."
)


def read_part(text: str) -> str:
    """``text`` up to and including its first ``</search>`` or ``</answer>`` (all if neither)."""
    ends = [i + len(tag) for tag in CLOSING_TAGS if (i := text.find(tag)) >= 0]
    return text[: min(ends)] if ends else text


@register_agent("searchr1")
class SearchR1Agent(Agent):
    keeps_own_parser = True

    def default_system_prompt(self) -> str:
        return SYSTEM_PROMPT

    def parse(self, text: str) -> ParsedTurn:
        read = read_part(text)
        for match in SEARCH.finditer(read):
            if query := match.group(1).strip():
                return ParsedTurn(calls=[ToolCallRequest(SEARCH_TOOL, {"query": query})])
        return ParsedTurn(answer=read if ANSWER.search(read) else None)

    def write_calls(self, calls: list[ToolCallRequest]) -> str:
        """One ``search`` call as ``<search> query </search>`` (a turn holds one search).

        Raises:
            ValueError: several calls, another tool, or arguments other than ``query``.
        """
        query = single_call_argument(calls, "searchr1", SEARCH_TOOL, "query", "search")
        return f"<search> {query} </search>"
