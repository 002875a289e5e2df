"""The ``searchr1`` agent reads turns as AgentFly's ``SearchR1Agent`` does (cases written from its
rules: the text up to the first ``</search>``/``</answer>`` counts, its first non-empty
``<search>`` span is one ``search`` call, a turn without one ends the chain), and a scripted
chain searches a BM25 corpus and scores 1 on the right answer with ``qa_em_reward``."""

from __future__ import annotations

import json

import pytest

from agentfly.rollout.agent_loop import AgentLoop
from agentfly.rollout.agents import ParsedTurn, ToolCallRequest, get_agent
from agentfly.rollout.engines import EnginePool
from agentfly.rollout.engines import scripted as _scripted  # noqa: F401  (registers "scripted")
from agentfly.rollout.templates import TEMPLATES, get_template
from agentfly.rollout.tools import get_tool
from agentfly.rollout.tools.bind import bind_tools


def search_call(query):
    return [ToolCallRequest("search", {"query": query})]


@pytest.fixture
def agent():
    return get_agent("searchr1", [get_tool("search")])


def test_a_search_span_is_one_search_call_and_an_answer_span_ends_the_chain(agent):
    turn = agent.parse("<think>I lack the fact.</think>\n<search> capital of France </search>")
    assert turn == ParsedTurn(calls=search_call("capital of France"))  # query stripped
    # an answer ends the chain; the final answer is the turn up to </answer>, tags included, so
    # a QA reward scores the span (and a format reward sees the tags)
    done = agent.parse("<think>It is Paris.</think>\n<answer> Paris </answer>\ntrailing text")
    assert done == ParsedTurn(answer="<think>It is Paris.</think>\n<answer> Paris </answer>")
    # a turn with neither ends the chain without an answer (finish reason no_tool_call)
    assert agent.parse("I think it is Paris.") == ParsedTurn()
    assert agent.parse("") == ParsedTurn()


def test_whichever_tag_closes_first_decides_a_turn_with_both(agent):
    assert agent.parse("<search> q1 </search> <answer> A </answer>") == ParsedTurn(calls=search_call("q1"))
    assert agent.parse("<answer> A </answer> <search> q1 </search>") == ParsedTurn(answer="<answer> A </answer>")
    # a hallucinated <information> after the search is not read (nor the answer after it)
    text = "<search> q1 </search>\n<information>made up</information>\n<answer> Lyon </answer>"
    assert agent.parse(text) == ParsedTurn(calls=search_call("q1"))


def test_several_searches_run_only_the_first(agent):
    # the text read ends at the first </search>: the second span is never seen
    assert agent.parse("<search>a</search><search>b</search>").calls == search_call("a")
    # uppercase closing tags do not cut the text (AgentFly's cut is case-sensitive, its pattern
    # is not): both spans are read, and only the first becomes a call
    assert agent.parse("<SEARCH>a</SEARCH> <Search>b</Search>").calls == search_call("a")


def test_empty_and_unclosed_tags_make_no_call(agent):
    # an empty span is skipped, and the text is cut after it: the next span is not read
    assert agent.parse("<search>  </search><search>b</search>") == ParsedTurn()
    assert agent.parse("<search> capital of France") == ParsedTurn()  # unclosed: no call
    assert agent.parse("<answer> Paris") == ParsedTurn()  # unclosed: no answer either
    assert agent.parse("capital of France </search>") == ParsedTurn()  # closed, never opened
    # an unclosed search before a closed answer: the answer ends the chain
    assert agent.parse("<search> q <answer>Paris</answer>") == ParsedTurn(answer="<search> q <answer>Paris</answer>")
    # a second <search> inside an unclosed one is part of the query (the span runs to the first close)
    assert agent.parse("<search> a <search> b </search>").calls == search_call("a <search> b")


def test_observation_is_the_search_text_in_a_tool_message_and_the_prompt_is_search_r1s(agent):
    calls = search_call("capital of France")
    obs = "Doc 1 (Title: Paris) Paris is the capital and largest city of France."
    # the agent does not wrap results: the template does (as AgentFly's template does)
    assert agent.observation_messages(calls, [obs]) == [{"role": "tool", "content": obs}]
    assert agent.template_tools() is None  # the system prompt describes the tags, not the template
    assert "<search> query </search>" in agent.system_prompt
    assert "between <information> and </information>" in agent.system_prompt
    assert get_agent("searchr1", [], system_prompt="Mine.").system_prompt == "Mine."


@pytest.mark.skipif("search-r1" not in TEMPLATES, reason="the search-r1 template is not registered")
def test_the_search_r1_template_wraps_results_in_information(agent):
    obs = "Doc 1 (Title: Paris) Paris is the capital and largest city of France."
    messages = [{"role": "assistant", "content": "<search> capital of France </search>"},
                *agent.observation_messages(search_call("capital of France"), [obs])]
    between = get_template("search-r1").between_turns(messages, closed=True)
    # "\n" ends the sampled turn ("<|im_end|>\n"), then the results with no role marker
    assert between.startswith(f"\n<information>{obs}</information>\n")


def test_the_hermes_parser_named_by_agentflys_script_does_not_replace_its_own():
    agent = get_agent("searchr1", [get_tool("search")], parser="hermes")
    assert agent.parse("<search> q </search>").calls == search_call("q")
    call = '<tool_call>\n{"name": "search", "arguments": {"query": "q"}}\n</tool_call>'
    assert agent.parse(call) == ParsedTurn()
    # the hermes agent still takes another parser
    assert get_agent("hermes", [get_tool("search")], parser="searchr1").parse("<search> q </search>").calls == search_call("q")


def test_it_reads_back_the_search_it_writes(agent):
    calls = search_call("capital of France")
    assert agent.write_calls(calls) == "<search> capital of France </search>"
    assert agent.parse(agent.write_calls(calls)).calls == calls
    for bad in ([*calls, *calls], [ToolCallRequest("calculator", {"expression": "1"})],
                [ToolCallRequest("search", {"query": "q", "top_k": 2})]):
        with pytest.raises(ValueError):
            agent.write_calls(bad)


CORPUS = [
    {"id": "1", "title": "Paris", "contents": "Paris is the capital and largest city of France."},
    {"id": "2", "title": "Lyon", "contents": "Lyon is a city in France known for its cuisine."},
    {"id": "3", "title": "Volcanoes", "contents": "A volcano erupts when magma reaches the surface."},
]
QUESTION = "What is the capital of France?"


def search_loop(model_dir, corpus_path, script):
    pool = EnginePool("scripted", 0, engine_kwargs={"model": str(model_dir), "script": script})
    tools = bind_tools(["search"], {"search": {"corpus_path": str(corpus_path), "top_k": 1}})
    return AgentLoop(
        engine=pool, tokenizer=pool.tokenizer, template=get_template("qwen2.5"),
        agent=get_agent("searchr1", tools, parser="hermes"), reward="qa_em_reward",
        max_turns=4, seed=0,
    )


@pytest.fixture
def corpus_path(tmp_path):
    path = tmp_path / "wiki.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in CORPUS), encoding="utf-8")
    return path


@pytest.mark.parametrize("answer, reward", [("paris", 1.0), ("Lyon", 0.0)])
def test_a_chain_searches_the_corpus_then_answers_and_scores_exact_match(
    tiny_model_dir, corpus_path, answer, reward
):
    first = ("<think>I need to look this up.</think>\n<search> capital city of France </search>\n"
             "<information>made up</information>")
    script = [first, f"<think>The passage names it.</think>\n<answer> {answer} </answer>"]
    loop = search_loop(tiny_model_dir, corpus_path, script)
    (chain,) = loop.run([{"question": QUESTION, "golden_answers": ["Paris"]}])
    obs = "Doc 1 (Title: Paris) Paris is the capital and largest city of France."
    assert [(c.name, c.arguments, c.observation) for c in chain.tool_calls] == [
        ("search", {"query": "capital city of France"}, obs)]
    assert chain.num_turns == 2 and chain.finish_reason == "answer"
    assert chain.final_response == f"<think>The passage names it.</think>\n<answer> {answer} </answer>"
    assert chain.reward == reward  # "paris" normalises to "Paris"; "Lyon" is not it
    # the observation follows the first turn as qwen2.5 lays out a tool message, not trained on
    text = loop.tokenizer.decode(chain.input_ids)
    assert (f"{first}<|im_end|>\n<|im_start|>user\n<tool_response>\n{obs}\n</tool_response><|im_end|>\n"
            "<|im_start|>assistant\n<think>The passage") in text
    untrained = loop.tokenizer.decode([t for t, m in zip(chain.response_ids, chain.loss_mask) if not m])
    assert obs in untrained and "<search>" not in untrained
