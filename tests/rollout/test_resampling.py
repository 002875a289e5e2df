"""Failed chains re-run as they fail, within the budget past the first round
(:mod:`agentfly.rollout.resampling`).

The rule on hand-timed runs (a clock the test sets), its decisions derived by hand; then the
agent loop with a scripted engine whose reply depends on the chain's seed and tools that hang or
sleep: a failed chain's re-run starts while another chain's first run still runs, and a second
re-run that would end past the budget is not started.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from agentfly.core.trajectory import ToolCallRecord, Trajectory
from agentfly.models.tiny import build_tiny_model
from agentfly.rollout.agent_loop import AgentLoop, chain_seed
from agentfly.rollout.agents import get_agent
from agentfly.rollout.engines import EnginePool
from agentfly.rollout.engines.base import per_prompt, register_engine
from agentfly.rollout.engines.scripted import ScriptedEngine
from agentfly.rollout.failures import FailedChainsError, complete_groups, failure_reason
from agentfly.rollout.resampling import Resampler
from agentfly.rollout.templates import get_template
from agentfly.rollout.tools import get_tool, tool

# ------------------------------------------------------------------ the rule, hand-timed


def run(group: int, index: int, failed: bool) -> Trajectory:
    """A chain run; ``failed``: a tool call past its deadline (an infrastructure failure)."""
    t = Trajectory(prompt_ids=[1], group_id=group, chain_index=index, finish_reason="answer")
    if failed:
        t.tool_calls = [ToolCallRecord("calc", {}, "Error: timeout", ok=False, error="timeout")]
    return t


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def decide(resampler: Resampler, clock: Clock, ends: list[tuple]) -> list[bool]:
    """Each run of ``ends`` (time it ended, chain index, attempt, seconds it took, failed?) ends in
    turn; the resampler's answer to each."""
    out = []
    for at, index, attempt, seconds, failed in ends:
        clock.now = at
        out.append(resampler.rerun(run(0, index, failed), attempt, seconds))
    return out


def test_past_the_first_round_a_rerun_starts_only_if_it_would_end_within_the_budget():
    """Budget 5 s, 3 chains A, B, C (0, 1, 2). The first round ends at t=4 with C's first run.
    A's 2nd re-run, at 5 after a 2 s run: 5 - 4 + 2 = 3 <= 5, started. A's 4th run: past
    max_resamples. C's re-run, at 8 after a 4 s run: 8 - 4 + 4 = 8 > 5, not started."""
    clock = Clock()
    resampler = Resampler(max_resamples=3, budget_s=5.0, clock=clock)
    resampler.start(3)
    ends = [
        (1.0, 0, 0, 1.0, True),  # A fails: re-run
        (2.0, 1, 0, 2.0, False),  # B answers
        (3.0, 0, 1, 2.0, True),  # A's re-run fails in the first round: re-run
        (4.0, 2, 0, 4.0, True),  # C fails, the last first run: the round ends; re-run
        (5.0, 0, 2, 2.0, True),  # would end at 7 = round + 3: re-run
        (7.0, 0, 3, 2.0, True),  # A has had its 3 re-runs
        (8.0, 2, 1, 4.0, True),  # would end at 12 = round + 8: not re-run
    ]
    assert decide(resampler, clock, ends) == [True, False, True, True, True, False, False]
    assert [(t.chain_index, r) for t, r in resampler.replaced] == [
        (0, "tool_timeout"),
        (0, "tool_timeout"),
        (2, "tool_timeout"),
        (0, "tool_timeout"),
    ]
    assert resampler.past_budget == 1  # C's; A's last failure is max_resamples'
    assert resampler.first_round_s == 4.0  # started at 0


def test_the_unset_budget_is_the_deadline_of_the_calls_that_timed_out():
    """Budget unset, the tool ``calc``'s deadline 5 s, 3 chains (A, B, C). Before any call times
    out the budget is 30 s. A's call to calc hangs; A fails at t=7 after 7 s (two healthy
    seconds and the 5 s deadline): the budget is now 5 s. B answers at 8; C hangs too and fails
    at 9, ending the round: re-run. A's re-run (from 7) fails at 14 after 7 s: a third run would
    end 14 - 9 + 7 = 12 s past the round > 5: not started. C's re-run (from 9) ends at 9.5 after a
    quick 0.5 s failure: 0.5 + 0.5 <= 5: started. So a hung chain gets no hung run past the
    round beyond the deadline's worth, whatever its healthy time."""
    clock = Clock()
    resampler = Resampler(max_resamples=3, budget_s=None, clock=clock)
    resampler.start(3, deadlines={"calc": 5.0, "search": 60.0})
    assert resampler.budget() == 30.0
    ends = [
        (7.0, 0, 0, 7.0, True),  # A: re-run whatever the budget (the first round)
        (8.0, 1, 0, 8.0, False),
        (9.0, 2, 0, 7.0, True),  # C: the round ends; re-run
        (9.5, 2, 1, 0.5, True),  # 0.5 + 0.5 <= 5: re-run
        (14.0, 0, 1, 7.0, True),  # 5 + 7 > 5: not re-run
    ]
    assert decide(resampler, clock, ends) == [True, False, True, True, False]
    assert resampler.budget() == 5.0 and resampler.past_budget == 1
    assert "resample_budget_s=null (5 s)" in resampler.settings()


def test_a_failed_first_run_is_rerun_whatever_the_budget():
    """Budget 0: B's first run ends the round at t=10, failed after 10 s: re-run all the same
    (the first round is waited for anyway); its re-run, failed at 20, is not."""
    clock = Clock()
    resampler = Resampler(max_resamples=3, budget_s=0.0, clock=clock)
    resampler.start(2)
    ends = [(1.0, 0, 0, 1.0, False), (10.0, 1, 0, 10.0, True), (20.0, 1, 1, 10.0, True)]
    assert decide(resampler, clock, ends) == [False, True, False]
    assert resampler.past_budget == 1 and len(resampler.replaced) == 1


def test_no_resamples_re_runs_nothing():
    resampler = Resampler(max_resamples=0)
    resampler.start(1)
    assert not resampler.rerun(run(0, 0, True), 0, 1.0)
    assert resampler.replaced == [] and resampler.past_budget == 0


def test_the_message_of_a_rollout_left_with_nothing_names_the_budget():
    clock = Clock()
    resampler = Resampler(max_resamples=3, budget_s=0.0, clock=clock)
    resampler.start(1)
    decide(resampler, clock, [(1.0, 0, 0, 1.0, True), (2.0, 0, 1, 1.0, True)])
    with pytest.raises(FailedChainsError) as err:
        complete_groups([run(0, 0, True)], "resample", resampler=resampler)
    said = str(err.value)
    assert "max_resamples=3, resample_budget_s=0" in said
    assert "1 failed run(s) not re-run past the budget" in said
    assert "tool_timeout ×2" in said and "1 re-run(s)" in said


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"max_resamples": -1}, "max_resamples"),
        ({"budget_s": -1.0}, "resample_budget_s"),
        ({"budget_s": float("nan")}, "resample_budget_s"),
    ],
)
def test_a_negative_bound_is_refused(kwargs, named):
    with pytest.raises(ValueError, match=named):
        Resampler(**kwargs)


def test_the_config_s_default_budget_is_the_resampler_s():
    from agentfly.config.schema import AlgorithmConfig

    assert AlgorithmConfig().resample_budget_s is None is Resampler().budget_s


def test_a_negative_budget_is_refused_when_the_config_is_composed(tmp_path):
    from agentfly.config import ConfigError
    from tests.config.plans import base, compose, write_plan_data

    with pytest.raises(ConfigError, match=r"algorithm\.resample_budget_s"):
        compose([*base(write_plan_data(tmp_path)), "algorithm.resample_budget_s=-1"])


# ------------------------------------------------------------------ through the agent loop

HANG_S = 0.5  # the hung tool's deadline


@tool(name="test_resampling_hang", timeout=HANG_S)
async def _hang() -> str:
    """Never answers."""
    await asyncio.sleep(30)
    return "unreachable"


@tool(name="test_resampling_sleep", timeout=10.0)
async def _sleep(seconds: float) -> str:
    """Answers after ``seconds``.

    Args:
        seconds: how long.
    """
    await asyncio.sleep(seconds)
    return "done"


def call(name: str, arguments: dict) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


ANSWER = call("answer", {"answer": "1"})
HANG = [call("test_resampling_hang", {}), ANSWER]
SEED = 0
SEEN: list[int | None] = []  # the seed of every turn the engine was asked for, in order


def sleep(seconds: float) -> list[str]:
    return [call("test_resampling_sleep", {"seconds": seconds}), ANSWER]


# group 0: chain 0 hangs, its re-run answers; chain 1 sleeps 1.5 s (3 deadlines)
# group 1: chain 0 hangs twice, then answers; chain 1 sleeps 0.6 s
SCRIPTS = [
    [chain_seed(SEED, 0, 0), HANG],
    [chain_seed(SEED, 0, 0, attempt=1), [ANSWER]],
    [chain_seed(SEED, 0, 1), sleep(3 * HANG_S)],
    [chain_seed(SEED, 1, 0), HANG],
    [chain_seed(SEED, 1, 0, attempt=1), HANG],
    [chain_seed(SEED, 1, 0, attempt=2), [ANSWER]],
    [chain_seed(SEED, 1, 1), sleep(0.6)],
]


@register_engine("test_resampling_seeded")
class SeededScript(ScriptedEngine):
    """Replays the script of the chain's seed (``scripts`` as [seed, turns] pairs)."""

    def __init__(self, model, *, scripts: list, **kwargs) -> None:
        super().__init__(model, **kwargs)
        self.scripts = {int(seed): list(turns) for seed, turns in scripts}

    def generate(self, prompts, sampling):
        out = []
        for prompt, sp in zip(prompts, per_prompt(prompts, sampling), strict=True):
            SEEN.append(sp.seed)
            self.script = self.scripts[sp.seed]
            out += super().generate([prompt], sp)
        return out


@pytest.fixture(scope="module")
def loop(tmp_path_factory):
    model = build_tiny_model(tmp_path_factory.mktemp("tiny"))
    pool = EnginePool(
        "test_resampling_seeded",
        0,
        engine_kwargs={"model": str(model), "script": [ANSWER], "scripts": SCRIPTS},
    )
    tools = [get_tool(t) for t in ("answer", "test_resampling_hang", "test_resampling_sleep")]
    yield AgentLoop(
        engine=pool,
        tokenizer=pool.tokenizer,
        template=get_template("qwen2.5"),
        agent=get_agent("hermes", tools),
        max_turns=2,
        num_chains=2,
        max_tokens=256,
        seed=SEED,
    )
    pool.shutdown()


ROW = [{"question": "What is 0+1?", "answer": "1"}]


def test_a_failed_chain_is_rerun_while_the_first_round_still_runs(loop):
    """Chain 0's call times out at 0.5 s and its re-run starts then, before chain 1's 1.5 s call
    ends (after the round, its turn would follow chain 1's second one)."""
    SEEN.clear()
    trajs = loop.run(ROW, group_offset=0, retry=Resampler(budget_s=0.0))
    assert [failure_reason(t) for t in trajs] == [None, None]
    rerun, slow = chain_seed(SEED, 0, 0, attempt=1), chain_seed(SEED, 0, 1)
    second_turn_of_slow = len(SEEN) - 1 - SEEN[::-1].index(slow)
    assert SEEN.count(slow) == 2 and SEEN.index(rerun) < second_turn_of_slow, SEEN


@pytest.mark.parametrize(
    ("budget_s", "runs", "kept"), [(0.1, 2, False), (None, 2, False), (30.0, 3, True)]
)
def test_a_rerun_that_would_end_past_the_budget_is_not_started(loop, budget_s, runs, kept):
    """Chain 0 hangs (0.5 s), is re-run at once and hangs again, ending at about 1 s, past the
    first round (chain 1's 0.6 s): a third run, judged to take 0.5 s like the one it replaces,
    would end about 0.9 s past the round. Budget 0.1 s, or unset (the hanging tool's deadline,
    0.5 s): not started, the chain stays failed; 30 s: it runs and answers."""
    SEEN.clear()
    resampler = Resampler(budget_s=budget_s)
    trajs = loop.run(ROW, group_offset=1, retry=resampler)
    assert SEEN.count(chain_seed(SEED, 1, 0, attempt=2)) == runs - 2  # its one turn, or none
    assert (failure_reason(trajs[0]) is None) == kept
    assert len(resampler.replaced) == runs - 1
    assert resampler.past_budget == (0 if kept else 1)



def test_a_chain_that_fails_before_its_first_run_still_ends_the_first_round(loop):
    """A row whose images cannot be used (this text model has no image processor) fails its
    chains before they run; the first round must still end when the other chains' first runs
    do, or the budget never applies: group 1 as in the test above (budget 0.1 s: the third run
    of chain 0 is not started), beside an image row's group."""
    SEEN.clear()
    resampler = Resampler(budget_s=0.1)
    rows = [*ROW, {"question": "What is 2+2?", "answer": "4", "images": ["not an image"]}]
    trajs = loop.run(rows, group_offset=1, retry=resampler)
    assert [t.error.startswith("ImageError") for t in trajs[2:]] == [True, True]
    assert resampler.first_round_s is not None
    assert SEEN.count(chain_seed(SEED, 1, 0, attempt=2)) == 0 and resampler.past_budget == 1
    assert failure_reason(trajs[0]) is not None


def reward_failed(group: int, index: int, kind: str, message: str) -> Trajectory:
    t = Trajectory(prompt_ids=[1], group_id=group, chain_index=index, finish_reason="answer")
    t.reward_failed, t.reward_error, t.error = True, kind, f"reward {message}"
    return t


def test_a_failure_no_re_run_can_change_is_not_re_run():
    """A reward raising the same exception again, or a row lacking the reward's field: not re-run
    (counted in ``repeated`` and said in the settings); a different exception and a hung tool call
    are re-run each time."""
    r = Resampler(max_resamples=3, budget_s=1e9)
    r.start(4)
    same = "raised NameError: name 'scroe' is not defined"
    assert r.rerun(reward_failed(0, 0, "exception", same), 0, 1.0)  # the first time: may be the response's
    assert not r.rerun(reward_failed(0, 0, "exception", same), 1, 1.0)  # the same again: the reward's code
    assert r.rerun(reward_failed(0, 1, "exception", "raised KeyError: 'x'"), 0, 1.0)
    assert r.rerun(reward_failed(0, 1, "exception", "raised KeyError: 'y'"), 1, 1.0)  # another message
    assert not r.rerun(reward_failed(1, 0, "missing_field", "requires field 'answer'"), 0, 1.0)
    assert r.rerun(run(1, 1, True), 0, 1.0) and r.rerun(run(1, 1, True), 1, 1.0)  # a hang may pass
    assert r.repeated == 2
    assert "2 failed run(s) not re-run: they would fail the same way" in r.settings()


def test_a_rollout_lost_to_the_reward_s_own_code_says_so():
    trajs = [reward_failed(g, k, "exception", "raised NameError: name 'scroe' is not defined")
             for g in range(2) for k in range(2)]
    with pytest.raises(FailedChainsError, match="failed by your code: the reward function") as err:
        complete_groups(trajs, "resample")
    assert "NameError" in str(err.value)
    hung = [run(g, k, True) for g in range(2) for k in range(2)]
    with pytest.raises(FailedChainsError, match="failed by the infrastructure"):
        complete_groups(hung, "resample")
