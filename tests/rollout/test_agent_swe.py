"""The SWE agents: ``bash_swe`` reads turns as AgentFly's ``BashSWEAgent`` does (cases written from
its rules: the first bash block is the command, ``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``
submits), ``qwen3coder_swe`` reads Qwen3-Coder's calls; and scripted chains of each fix a planted
bug of the offline task in their workspace and score 1 with ``swe_test_reward`` (a chain that
does not fix it scores 0)."""

from __future__ import annotations

import pytest

from agentfly.data.buggy_repos import make_task
from agentfly.rollout.agent_loop import AgentLoop
from agentfly.rollout.agents import ParsedTurn, ToolCallRequest, get_agent
from agentfly.rollout.agents.qwen3_coder import write_qwen3_coder
from agentfly.rollout.agents.swe_prompts import QWEN3CODER_SYSTEM_PROMPT
from agentfly.rollout.engines import EnginePool
from agentfly.rollout.engines import scripted as _scripted  # noqa: F401  (registers "scripted")
from agentfly.rollout.templates import get_template
from agentfly.rollout.tools import get_tool
from agentfly.rollout.tools.workspace import WORKDIR_MOUNT

needs_bwrap = pytest.mark.needs_bwrap  # skipped, saying why, where bubblewrap cannot run
SHELL = [get_tool("run_shell_command")]
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def shell_call(cmd):
    return ParsedTurn(calls=[ToolCallRequest("run_shell_command", {"cmd": cmd})])


@pytest.fixture
def bash():
    return get_agent("bash_swe", SHELL)


def test_bash_swe_runs_the_first_bash_block_only(bash):
    text = "THOUGHT: look around.\n\n```mswea_bash_command\nls -la\n```\nthen\n```bash\nrm -rf /\n```"
    assert bash.parse(text) == shell_call("ls -la")
    assert bash.parse("```BASH\n  cat a.py && nl -ba b.py  \n```") == shell_call("cat a.py && nl -ba b.py")
    assert bash.parse("```bash\ncat <<'EOF' > x.py\nprint(1)\nEOF\n```") == shell_call("cat <<'EOF' > x.py\nprint(1)\nEOF")


def test_bash_swe_ends_the_chain_on_submit_on_no_block_and_on_an_empty_block(bash):
    text = f"Done.\n```mswea_bash_command\n{SUBMIT}\n```\nafterwards"
    assert bash.parse(text) == ParsedTurn(answer=f"Done.\n```mswea_bash_command\n{SUBMIT}\n```")
    assert bash.parse("I think it is fixed.") == ParsedTurn()
    assert bash.parse("```python\nprint(1)\n```") == ParsedTurn()  # not a bash block
    assert bash.parse("```bash\n\n```\n```bash\nls\n```") == ParsedTurn()  # the first block is empty
    assert bash.parse("```bash\nls") == ParsedTurn()  # never closed
    # without run_shell_command among its tools, a command is no call
    assert get_agent("bash_swe", [get_tool("read_file")]).parse("```bash\nls\n```") == ParsedTurn()


def test_bash_swe_keeps_its_parser_writes_its_block_and_prompts_like_agentfly():
    agent = get_agent("bash_swe", SHELL, parser="hermes")  # AgentFly's script names hermes
    assert agent.parse("```bash\nls\n```") == shell_call("ls")
    calls = shell_call("python -m unittest -q").calls
    assert agent.parse(agent.write_calls(calls)).calls == calls
    with pytest.raises(ValueError):
        agent.write_calls([ToolCallRequest("read_file", {"path": "a"})])
    assert f"Working Directory: {WORKDIR_MOUNT}/" in agent.system_prompt
    assert "`echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`" in agent.system_prompt
    assert agent.template_tools() is None


def test_qwen3coder_swe_reads_qwen3_coder_calls_and_ends_without_one():
    tools = [get_tool(n) for n in ("read_file", "run_python")]
    agent = get_agent("qwen3coder_swe", tools, parser="qwen3_coder")
    turn = "<tool_call>\n<function=run_python>\n<parameter=path>\nx.py\n</parameter>\n<parameter=timeout>\n5\n</parameter>\n</function>\n</tool_call>"
    assert agent.parse(turn) == ParsedTurn(calls=[ToolCallRequest("run_python", {"path": "x.py", "timeout": 5})])
    assert agent.parse("All tests pass now.") == ParsedTurn()
    assert get_agent("qwen3coder_swe", []).parse(turn) == ParsedTurn()  # no tools: no call
    assert agent.system_prompt == QWEN3CODER_SYSTEM_PROMPT
    assert [t["function"]["name"] for t in agent.template_tools()] == ["read_file", "run_python"]
    hermes = '<tool_call>\n{"name": "read_file", "arguments": {"path": "a"}}\n</tool_call>'
    assert get_agent("qwen3coder_swe", tools, parser="hermes").parse(hermes).calls == [
        ToolCallRequest("read_file", {"path": "a"})]


def swe_loop(model_dir, script, agent, tools, template):
    pool = EnginePool("scripted", 0, engine_kwargs={"model": str(model_dir), "script": script, "max_model_len": 32768})
    return AgentLoop(
        engine=pool, tokenizer=pool.tokenizer, template=get_template(template),
        agent=get_agent(agent, [get_tool(t) for t in tools]), reward="swe_test_reward",
        max_turns=6, max_tokens=2048, max_model_len=32768, seed=0,
    )


def fixed_source(task):
    bug = task["bug"]
    return task["repo"][bug["path"]].replace(bug["buggy"], bug["fixed"])


@needs_bwrap
def test_a_qwen3coder_swe_chain_edits_the_bug_and_scores_1(tiny_model_dir):
    task = make_task(4)  # inverted_condition
    bug = task["bug"]
    malformed = "<tool_call>\n<function=read_file\n</function>\n</tool_call>"
    read = write_qwen3_coder([ToolCallRequest("read_file", {"path": bug["path"]})])
    edit = write_qwen3_coder([ToolCallRequest(
        "edit_file", {"path": bug["path"], "search_block": bug["buggy"], "replace_block": bug["fixed"]})])
    test = write_qwen3_coder([ToolCallRequest("run_shell_command", {"cmd": task["test_command"]})])
    script = [malformed, f"Let me read it.\n{read}", f"<think>It keeps the empty words.</think>\n{edit}", test, "Fixed."]
    tools = ("read_file", "edit_file", "run_shell_command")
    (chain,) = swe_loop(tiny_model_dir, script, "qwen3coder_swe", tools, "qwen-xml-think").run([task])
    assert chain.error is None and chain.finish_reason == "no_tool_call" and chain.num_turns == 5
    assert [(c.name, c.ok, c.error) for c in chain.tool_calls] == [
        ("", False, "invalid_arguments"),  # the malformed call: counted, answered, not run
        ("read_file", True, None), ("edit_file", True, None), ("run_shell_command", True, None)]
    assert "is not closed with '>'" in chain.tool_calls[0].observation
    assert chain.tool_calls[3].observation.endswith("OK")  # the tests pass in the workspace
    assert chain.environments["swe_workspace"]["changed"] == {bug["path"]: fixed_source(task)}
    assert chain.reward == 1.0


@needs_bwrap
def test_a_bash_swe_chain_fixes_the_bug_submits_and_scores_1_and_one_that_does_not_scores_0(tiny_model_dir):
    task = make_task(1)  # wrong_operator
    bug = task["bug"]
    patch = (
        "```mswea_bash_command\npython - <<'EOF'\nimport pathlib\n"
        f"p = pathlib.Path({bug['path']!r})\np.write_text(p.read_text().replace({bug['buggy']!r}, {bug['fixed']!r}))\nEOF\n```"
    )
    submit = f"```mswea_bash_command\n{SUBMIT}\n```"
    (fixed,) = swe_loop(tiny_model_dir, [patch, submit], "bash_swe", ["run_shell_command"], "qwen3-miniswe").run([task])
    assert fixed.finish_reason == "answer" and fixed.final_response == submit
    assert [c.observation for c in fixed.tool_calls] == ["(no output)"]
    assert fixed.reward == 1.0
    # an edit of the test instead of the code: the reward restores the row's tests
    cheat = f"```bash\necho 'pass' > {task['test_files'][1]}\n```"
    (cheated,) = swe_loop(tiny_model_dir, [cheat, submit], "bash_swe", ["run_shell_command"], "qwen3-miniswe").run([task])
    assert list(cheated.environments["swe_workspace"]["changed"]) == [task["test_files"][1]]
    assert cheated.reward == 0.0
