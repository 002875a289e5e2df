"""Environments in chains: AgentFly's WebShop tool and reward on scripted turns, per-turn rewards,
observations as the ``action-agent`` template lays them out, and environment faults counted as
the infrastructure's failures of their chain only, with no environment process left behind.

WebShop's reward, derived by hand for the goal "waterproof hiking boots with a rubber sole in
brown, size 10" (2 attributes, 2 options; tests/envs/webshop_files.py):

    reward = r_type * (attributes matched + options matched + [price ok]) / (2 + 2 + 1)

the boots of the goal with brown and 10: (2 + 2 + 1) / 5 = 1.0; the plain boots (same query, so
r_type 1; "waterproof" is nowhere in their attributes, title, features or description) with brown
and 10: (1 + 2 + 1) / 5 = 0.8.
"""

from __future__ import annotations

import asyncio
import time

import psutil
import pytest

from agentfly.rollout.agent_loop import AgentLoop
from agentfly.rollout.agents import get_agent
from agentfly.rollout.engines import EnginePool
from agentfly.rollout.failures import complete_groups, failure_reason
from agentfly.rollout.templates import get_template
from agentfly.rollout.tools import run_tool_call
from agentfly.rollout.tools.bind import ToolConfigError, bind_tools
from agentfly.rollout.tools.environment import start_environments
from agentfly.rollout.tools.resources import ResourcePool
from tests.envs.env_script import COUNTING_ENV, action
from tests.envs.webshop_files import BOOTS, PLAIN_BOOTS, write_webshop_files

BUY_BOOTS = "buy the waterproof boots"


def env_processes() -> list[psutil.Process]:
    """This process's environment processes still running."""
    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if "agentfly.envs.process" in " ".join(proc.cmdline()) and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def no_env_process_within(seconds: float) -> list[psutil.Process]:
    deadline = time.monotonic() + seconds
    while (left := env_processes()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def make_loop(model_dir, scripts, tools, tool_config, reward, *, agent="action", template="action-agent", **kw):
    pool = EnginePool("env_script", 0, engine_kwargs={"model": str(model_dir), "scripts": scripts})
    return AgentLoop(
        engine=pool, tokenizer=pool.tokenizer, template=get_template(template),
        agent=get_agent(agent, bind_tools(tools, tool_config)), reward=reward,
        resources=ResourcePool("local"), max_model_len=4096, seed=0, **kw,
    )


@pytest.fixture(scope="module")
def webshop_dir(tmp_path_factory):
    pytest.importorskip("rapidfuzz", reason="needs rapidfuzz (pip install 'agentfly[envs]')")
    return write_webshop_files(tmp_path_factory.mktemp("webshop"))


def test_webshop_scripted_purchases_score_webshop_formula(tiny_model_dir, webshop_dir):
    # chain 0 (seed 0) buys the goal's boots (AgentFly's choose[...] for the last click), chain 1
    # the plain boots; both in brown and size 10
    gold = [action("search[waterproof hiking boots]"), action(f"click[{BOOTS}]"), action("click[Brown]"),
            action("click[10]"), action("choose[Buy Now]")]
    plain = [*gold[:1], action(f"click[{PLAIN_BOOTS}]"), *gold[2:]]
    loop = make_loop(tiny_model_dir, {BUY_BOOTS: [gold, plain]}, ["webshop_browser_action"],
                     {"webshop_browser_action": {"data_dir": str(webshop_dir)}}, "webshop_reward",
                     max_turns=8, num_chains=2)
    bought, missed = loop.run([{"question": BUY_BOOTS, "task_id": 0}])
    assert bought.reward == 1.0 and missed.reward == pytest.approx(4 / 5)
    assert missed.reward_extras["attributes_matched"] == 1 and missed.reward_extras["options_matched"] == 2
    for traj, reward in ((bought, 1.0), (missed, 0.8)):
        # the purchase ends the episode and the chain; its reward is on its turn (the fifth)
        assert traj.finish_reason == "episode_over" and traj.num_turns == 5
        assert traj.turn_rewards == pytest.approx([0.0, 0.0, 0.0, 0.0, reward])
        assert [c.reward for c in traj.tool_calls] == pytest.approx([0.0, 0.0, 0.0, 0.0, reward])
        assert traj.environments["webshop"]["return"] == pytest.approx(reward)
        assert failure_reason(traj) is None
    # observations are the environment's text, not trained on, laid out as AgentFly's template
    text = loop.tokenizer.decode(bought.input_ids)
    search_page = bought.tool_calls[0].observation
    assert "Page 1 (Total results: 2)" in search_page
    assert search_page.endswith(f"Clickables: ['back to search', '{BOOTS.lower()}', '{PLAIN_BOOTS.lower()}']")
    assert f"</action><|im_end|>\n<observation>{search_page}</observation>\n<|im_start|>assistant\n" in text
    untrained = loop.tokenizer.decode([t for t, m in zip(bought.response_ids, bought.loss_mask) if not m])
    assert search_page in untrained and "<action>" not in untrained
    assert not no_env_process_within(5)


def test_webshop_browser_takes_the_verb_and_its_value_apart(webshop_dir):
    async def go():
        pool = ResourcePool("local")
        chain = pool.chain(0)
        tools = bind_tools(["webshop_browser"], {"webshop_browser": {"data_dir": str(webshop_dir)}})
        try:
            await start_environments(chain, tools, {"task_id": 0})
            found = await run_tool_call(tools[0], {"action": "search", "value": "waterproof hiking boots"}, resource=chain)
            wrong = await run_tool_call(tools[0], {"action": "buy", "value": "it"}, resource=chain)
        finally:
            await chain.release_all()
        return found, wrong

    found, wrong = asyncio.run(go())
    assert found.ok and "Page 1 (Total results: 2)" in found.observation and found.reward == 0.0
    assert wrong.observation == "Error: Invalid action 'buy'. Must be either 'search' or 'click'"


def test_environment_faults_fail_their_chain_only_and_leave_no_process(tiny_model_dir, tmp_path, monkeypatch):
    # four chains at once: one environment hangs in a step (past its 2 s step_timeout), one's
    # process dies, one fails in reset (its row), one plays two steps then stops acting
    scripts = {"hang": [[action("hang")]], "crash": [[action("crash")]], "fail": [[action("one")]],
               "fine": [[action("one"), action("two"), "done"]]}
    rows = [{"question": "hang"}, {"question": "crash"}, {"question": "fail", "fail": True}, {"question": "fine"}]
    loop = make_loop(tiny_model_dir, scripts, ["counting_step"], {}, "counting_return", max_turns=4)
    monkeypatch.setenv("COUNTING_ENV_CLOSED_DIR", str(tmp_path))
    start = time.monotonic()
    hang, crash, fail, fine = loop.run(rows)
    assert time.monotonic() - start < 30  # the hang is cut at its deadline
    assert [failure_reason(t) for t in (hang, crash, fail, fine)] == [
        "tool_env_timeout", "tool_env_crashed", "env_start", None]
    assert hang.finish_reason == crash.finish_reason == "env_failed" and hang.num_turns == crash.num_turns == 1
    assert "did not return within 2 s" in hang.tool_calls[0].observation
    assert "did not start" in fail.error and "no such level" in fail.error and fail.num_turns == 0
    # the healthy chain: one point a step, on the turn that took it
    assert fine.finish_reason == "no_tool_call" and fine.reward == 2.0 and fine.turn_rewards == [1.0, 1.0, 0.0]
    metrics = complete_groups([hang, crash, fail, fine], "keep").metrics
    assert metrics["rollout/failed_chains"] == 3
    assert {k: v for k, v in metrics.items() if k.startswith("rollout/failed_chains/")} == {
        "rollout/failed_chains/env_start": 1.0, "rollout/failed_chains/tool_env_crashed": 1.0,
        "rollout/failed_chains/tool_env_timeout": 1.0}
    # the healthy chain's environment was closed when its chain ended (the others were killed);
    # every environment process and the child each started (a stand-in for Java or Stockfish) is gone
    assert [p.name for p in tmp_path.iterdir()] == [str(fine.environments[COUNTING_ENV]["steps"][0]["info"]["pid"])]
    assert not no_env_process_within(5)
    children = [t.environments[COUNTING_ENV]["reset_info"]["child_pid"] for t in (hang, crash, fine)]
    assert not [pid for pid in children if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]


def test_steps_of_different_chains_overlap(tiny_model_dir):
    # four chains, three 1-second steps each: their environments step at the same time
    scripts = {f"napper {i}": [[action("nap")] * 3 + ["done"]] for i in range(4)}
    loop = make_loop(tiny_model_dir, scripts, ["counting_step"], {"counting_step": {"step_timeout": 10.0}},
                     "counting_return", max_turns=4)
    trajs = loop.run([{"question": q} for q in scripts])
    assert [t.reward for t in trajs] == [3.0] * 4
    spans = [(s["info"]["began"], s["info"]["ended"], i) for i, t in enumerate(trajs)
             for s in t.environments[COUNTING_ENV]["steps"]]
    overlapping = {(a[2], b[2]) for a in spans for b in spans if a[2] < b[2] and a[0] < b[1] and b[0] < a[1]}
    assert len(overlapping) >= 3, spans  # serial steps would overlap nowhere


def test_the_tools_of_one_environment_share_its_settings():
    pytest.importorskip("chess", reason="needs python-chess (pip install 'agentfly[envs]')")
    move, state = bind_tools(["chess_move", "chess_get_state"],
                             {"chess_move": {"use_engine": False, "analysis_time": 0.2},
                              "chess_get_state": {"timeout": 200.0}})
    assert move.settings == state.settings and state.settings.analysis_time == 0.2 and not state.settings.use_engine
    assert (move.timeout, state.timeout) == (150.0, 200.0)  # a call's backstop stays the tool's own
    with pytest.raises(ToolConfigError, match="act on one chess_puzzle environment per chain and set its analysis_time"):
        bind_tools(["chess_move", "chess_get_state"], {"chess_move": {"use_engine": False, "analysis_time": 0.2},
                                                       "chess_get_state": {"analysis_time": 0.3}})
    with pytest.raises(ToolConfigError, match=r"timeout=30 s must exceed its environment's step_timeout and reset_timeout \(120 s\)"):
        bind_tools(["chess_move"], {"chess_move": {"use_engine": False, "timeout": 30.0}})
    with pytest.raises(ToolConfigError, match="shuffle_goals numbers WebShop's own goals: it needs data_dir"):
        bind_tools(["webshop_browser_action"], {"webshop_browser_action": {"shuffle_goals": True}})


def test_alfworld_tools_answer_from_the_chains_environment():
    # ALFWorld's game files are not here: the tools' own work, on a session's recorded answers
    from agentfly.envs.base import EnvCrashed
    from agentfly.rollout.tools import get_tool

    class Session:
        def reset_info(self):
            return {"goal": "put a clean apple in fridge",
                    "game_file": "/d/json_2.1.1/train/pick_clean_then_place_in_recep-Apple-None-Fridge-1/trial_T1/game.tw-pddl"}

        def info(self):
            return {"admissible_actions": ["go to fridge 1", "look"]}

        def restart(self):
            raise EnvCrashed("alfworld: its process died during reset() (killed by signal SIGKILL)")

    session = Session()
    assert get_tool("alfworld_get_task_objective").fn(resource=session).observation == (
        "Task: put a clean apple in fridge\nTask Type: pick_clean_then_place_in_recep")
    assert get_tool("alfworld_get_admissible_commands").fn(resource=session).observation == "go to fridge 1\nlook"
    reset = get_tool("alfworld_reset").fn(resource=session)
    assert (reset.ok, reset.error, reset.ends_chain) == (False, "env_crashed", True)
