"""Failure-aware groups: a chain the infrastructure failed never reaches the advantage baseline.

Hand-built trajectories for the rule and the bookkeeping (the agent loop's part, re-running a
failed chain as it fails, played by :func:`play`); one rollout through the agent loop and the
DataModule (a tool past its deadline in one chain, a scripted engine whose reply depends on
the chain's seed) for the whole path to the GRPO advantages. Expected advantages are computed by
hand: GRPO's ``(r - mean) / (std + 1e-6)`` with the Bessel-corrected std.
"""

from __future__ import annotations

import asyncio
import json
import math
from types import SimpleNamespace

import pytest

from agentfly.core.trajectory import ToolCallRecord, Trajectory
from agentfly.estimators import get_estimator
from agentfly.models.tiny import build_tiny_model
from agentfly.rollout.agent_loop import RESEED_STRIDE, AgentLoop, chain_seed
from agentfly.rollout.agents import get_agent
from agentfly.rollout.collate import collate_trajectories
from agentfly.rollout.datamodule import RolloutDataModule
from agentfly.rollout.engines import EnginePool
from agentfly.rollout.engines.base import per_prompt, register_engine
from agentfly.rollout.engines.scripted import ScriptedEngine
from agentfly.rollout.failures import FailedChainsError, complete_groups, failure_reason
from agentfly.rollout.resampling import Resampler
from agentfly.rollout.rewards import reward
from agentfly.rollout.templates import get_template
from agentfly.rollout.tools import get_tool, tool

# ------------------------------------------------------------------ hand-built chains


def chain(group: int, index: int, rew: float | None = 1.0, **fields) -> Trajectory:
    """A scored one-turn chain of two sampled tokens; ``fields`` override the record."""
    t = Trajectory(prompt_ids=[1, 2], group_id=group, chain_index=index, row={"question": "q"})
    t.append_sampled([5, 6], [-1.0, -1.0])
    t.num_turns, t.finish_reason, t.reward = 1, "answer", rew
    for name, value in fields.items():
        setattr(t, name, value)
    return t


def tool_failure(kind: str) -> list[ToolCallRecord]:
    return [ToolCallRecord("calc", {"x": 1}, f"Error: {kind}", ok=False, error=kind)]


def play(
    first: list[Trajectory], reruns: dict[tuple[int, int], list[Trajectory]], resampler: Resampler
) -> list[Trajectory]:
    """The agent loop's part, every run instant: each chain's first run ends, then the re-runs
    of ``reruns`` (by (group, chain index), in attempt order) while ``resampler`` asks for them;
    the last run of each chain, in order."""
    resampler.start(len(first))
    last = []
    for t in first:
        runs, attempt = iter(reruns.get((t.group_id, t.chain_index), [])), 0
        while resampler.rerun(t, attempt, 0.0):
            t, attempt = next(runs), attempt + 1
        last.append(t)
    return last


def grpo_advantages(trajs: list[Trajectory]) -> list[float]:
    """Each chain's GRPO advantage (the same on every sampled token), through collate."""
    batch = collate_trajectories(trajs, pad_id=0)
    adv, _ = get_estimator("grpo")(
        token_level_rewards=batch.token_level_rewards, response_mask=batch.response_mask,
        index=batch.index,
    )
    return [float(row[0]) for row in adv]


def by_hand(rewards: list[float]) -> list[float]:
    mean = sum(rewards) / len(rewards)
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (len(rewards) - 1))
    return [(r - mean) / (std + 1e-6) for r in rewards]


INFRA = [
    ({"finish_reason": "error", "error": "EngineLostError: engine 0 died"}, "engine"),
    ({"finish_reason": "error", "error": "EngineTimeoutError: past 600 s"}, "engine"),
    ({"finish_reason": "error", "error": "KeyError: 'role'"}, "chain_error"),
    ({"tool_calls": tool_failure("timeout")}, "tool_timeout"),
    ({"tool_calls": tool_failure("worker_died")}, "tool_worker_died"),
    ({"tool_calls": tool_failure("queue_timeout")}, "tool_queue_timeout"),  # the pool too small
    ({"tool_calls": tool_failure("malformed_output")}, "tool_malformed_output"),
    ({"tool_calls": tool_failure("unavailable")}, "tool_unavailable"),
    ({"reward_failed": True, "reward_error": "timeout", "reward": 0.0}, "reward_timeout"),
    ({"reward_failed": True, "reward_error": "exception", "reward": 0.0}, "reward_exception"),
    ({"reward_failed": True, "reward_error": "queue_timeout", "reward": 0.0}, "reward_queue_timeout"),
]
MODEL = [
    {"tool_calls": tool_failure("invalid_arguments"), "reward": 0.0},  # malformed call
    {"tool_calls": tool_failure("unknown_tool"), "reward": 0.0},
    {"tool_calls": tool_failure("exception"), "reward": 0.0},  # the tool refused the input
    {"tool_calls": tool_failure("cell_timeout"), "reward": 0.0},  # the model's infinite loop
    {"tool_calls": tool_failure("output_too_large"), "reward": 0.0},
    {"finish_reason": "max_turns", "reward": 0.0},
    {"finish_reason": "max_response_len", "truncated": True, "reward": 0.0},
    {"finish_reason": "no_tool_call", "reward": 0.0},
    {"finish_reason": "prompt_too_long", "reward": None, "error": "prompt_too_long: 9000 tokens"},
]


@pytest.mark.parametrize(("fields", "reason"), INFRA)
def test_an_infrastructure_failure_is_named(fields, reason):
    assert failure_reason(chain(0, 0, **fields)) == reason


@pytest.mark.parametrize("fields", MODEL)
def test_a_fault_of_the_model_keeps_its_reward(fields):
    assert failure_reason(chain(0, 0, **fields)) is None


def group_with_a_failed_chain(group: int = 0) -> list[Trajectory]:
    """Rewards [1, 0 (a tool past its deadline), 0 (a malformed call: the model's), 1]."""
    return [
        chain(group, 0, 1.0),
        chain(group, 1, 0.0, tool_calls=tool_failure("timeout")),
        chain(group, 2, 0.0, tool_calls=tool_failure("invalid_arguments")),
        chain(group, 3, 1.0),
    ]


def test_resample_puts_the_rerun_in_the_baseline_not_the_failure():
    first = group_with_a_failed_chain(0) + [chain(1, k, r) for k, r in enumerate([0, 1, 0, 1])]
    resampler = Resampler()
    trajs = play(first, {(0, 1): [chain(0, 1, 1.0)]}, resampler)
    assert [(t.group_id, t.chain_index) for t, _ in resampler.replaced] == [(0, 1)]  # once
    kept, _, metrics = complete_groups(trajs, "resample", resampler=resampler)
    assert [(t.group_id, t.chain_index) for t in kept] == [(t.group_id, t.chain_index) for t in first]
    assert grpo_advantages(kept) == pytest.approx(by_hand([1, 1, 0, 1]) + by_hand([0, 1, 0, 1]))
    assert metrics == {
        "rollout/failed_chains": 1.0, "rollout/failed_chains/tool_timeout": 1.0,
        "rollout/resampled_chains": 1.0, "rollout/dropped_groups": 0.0,
        "rollout/dropped_chains": 0.0,
        # every run's failures: the re-run chain's first run timed out, and chain (0, 2) made
        # a malformed call (the model's fault, trained on)
        "rollout/failures/tool": 2.0, "rollout/failures/tool_kinds/timeout": 1.0,
        "rollout/failures/tool_kinds/invalid_arguments": 1.0,
        "rollout/failures/reward": 0.0, "rollout/failures/chain": 0.0,
    }


def test_drop_leaves_the_group_out_and_keeps_the_model_fault_elsewhere():
    other = [chain(1, 0, 1.0), chain(1, 1, 0.0, tool_calls=tool_failure("invalid_arguments")),
             chain(1, 2, 0.0), chain(1, 3, 1.0)]
    kept, _, metrics = complete_groups(group_with_a_failed_chain(0) + other, "drop")
    assert kept == other  # group 0 is absent; the malformed call of group 1 stays, reward 0
    assert grpo_advantages(kept) == pytest.approx(by_hand([1, 0, 0, 1]))
    assert metrics["rollout/dropped_groups"] == 1 and metrics["rollout/dropped_chains"] == 4
    assert metrics["rollout/resampled_chains"] == 0


def test_keep_trains_on_the_zero_and_counts_it():
    trajs = group_with_a_failed_chain(0)
    kept, _, metrics = complete_groups(trajs, "keep")
    assert kept == trajs
    assert grpo_advantages(kept) == pytest.approx(by_hand([1, 0, 0, 1]))
    assert metrics["rollout/failed_chains/tool_timeout"] == 1


def test_nothing_failed_changes_nothing():
    trajs = [chain(0, k, r) for k, r in enumerate([1, 0, 0, 1])]
    trajs[2].tool_calls = tool_failure("invalid_arguments")
    resampler = Resampler()
    assert play(trajs, {}, resampler) == trajs and resampler.replaced == []  # nothing re-run

    for policy in ("resample", "drop", "keep"):
        kept, baselines, metrics = complete_groups(trajs, policy, resampler=resampler)
        assert len(kept) == len(trajs) and all(a is b for a, b in zip(kept, trajs, strict=True))
        assert baselines == []
        # the model's malformed call is counted as what it is; nothing else failed
        assert {k: v for k, v in metrics.items() if v} == {
            "rollout/failures/tool": 1.0, "rollout/failures/tool_kinds/invalid_arguments": 1.0,
        }


def test_a_failure_reads_the_same_in_every_count_however_its_group_ended():
    """The issue's case: a reward that raises on some rows. Its chains are not re-run (the same
    error twice) and their groups are dropped, so no chain trained on failed; the reward's
    failures still count under rollout/failures/reward as under rollout/failed_chains."""
    failing = [chain(0, k, 0.0, reward_failed=True, reward_error="exception", error="NameError: x") for k in range(4)]
    fine = [chain(1, k, r) for k, r in enumerate([0, 1, 0, 1])]
    for policy in ("resample", "drop"):
        kept, _, metrics = complete_groups(failing + fine, policy, resampler=Resampler() if policy == "resample" else None)
        assert kept == fine
        assert metrics["rollout/failed_chains/reward_exception"] == 4 == metrics["rollout/failures/reward"]
        assert metrics["rollout/failures/reward_kinds/exception"] == 4
        assert metrics["rollout/dropped_groups"] == 1 and metrics["rollout/dropped_chains"] == 4


def test_a_group_still_failing_after_the_resamples_is_dropped():
    first = group_with_a_failed_chain(0) + [chain(1, k) for k in range(4)]
    lost = [chain(0, 1, 0.0, finish_reason="error", error="EngineLostError: gone") for _ in range(3)]
    resampler = Resampler(max_resamples=2)
    trajs = play(first, {(0, 1): lost}, resampler)
    assert trajs[1] is lost[1]  # re-run twice, no third time
    kept, _, metrics = complete_groups(trajs, "resample", resampler=resampler)
    assert kept == first[4:]
    assert metrics["rollout/failed_chains"] == 3  # the first run and both re-runs
    assert metrics["rollout/failed_chains/tool_timeout"] == 1
    assert metrics["rollout/failed_chains/engine"] == 2
    assert metrics["rollout/resampled_chains"] == 2
    assert metrics["rollout/dropped_groups"] == 1 and metrics["rollout/dropped_chains"] == 4


def test_every_group_dropped_stops_with_the_failures_named():
    broken_reward = chain(1, 0, 0.0, reward_failed=True, reward_error="timeout",
                          error="reward timeout: did not return within 60 s")
    trajs = [*group_with_a_failed_chain(0), broken_reward]
    with pytest.raises(FailedChainsError) as err:
        complete_groups(trajs, "drop")
    said = str(err.value)
    assert "tool_timeout ×1" in said and "reward_timeout ×1" in said
    assert "Error: timeout" in said and "did not return within 60 s" in said


def test_a_group_that_cannot_be_completed_on_several_ranks_raises_instead_of_dropping():
    first = group_with_a_failed_chain(0) + [chain(1, k) for k in range(4)]
    resampler = Resampler()
    trajs = play(first, {(0, 1): [first[1]] * 3}, resampler)
    with pytest.raises(FailedChainsError, match="several ranks"):
        complete_groups(trajs, "resample", resampler=resampler, can_drop=False)


def test_a_failed_greedy_baseline_is_rerun_or_dropped_with_its_group():
    trajs = [chain(g, k) for g in (0, 1) for k in range(2)]
    baselines = [chain(0, 2, 1.0), chain(1, 2, 0.0, finish_reason="error", error="EngineLostError: x")]
    resampler = Resampler()
    last = play(trajs + baselines, {(1, 2): [chain(1, 2, 1.0)]}, resampler)
    kept, kept_baselines, _ = complete_groups(
        last[:4], "resample", resampler=resampler, baselines=last[4:]
    )
    assert kept == trajs and kept_baselines[0] is baselines[0]
    assert kept_baselines[1].reward == 1.0 and failure_reason(kept_baselines[1]) is None
    kept, kept_baselines, _ = complete_groups(trajs, "drop", baselines=baselines)
    assert kept == trajs[:2] and kept_baselines == baselines[:1]


# ------------------------------------------------------------------ through the agent loop


@tool(name="test_failures_hang", timeout=0.2)
async def _hang() -> str:
    """Never answers."""
    await asyncio.sleep(30)
    return "unreachable"


@reward(name="test_failures_exact", runs_in="thread")
def _exact(prediction: str, answer: str) -> float:
    return float(prediction.strip() == str(answer))


def call(name: str, arguments: object) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def answer(text: str) -> str:
    return call("answer", {"answer": text})


SEEN: list[tuple[int | None, float]] = []


@register_engine("test_failures_seeded")
class SeededScript(ScriptedEngine):
    """Replays the script of the chain's seed (``scripts`` as [seed, turns] pairs), else
    ``script``; records every (seed, temperature) it was asked for."""

    def __init__(self, model, *, scripts: list, **kwargs) -> None:
        super().__init__(model, **kwargs)
        self.scripts = {int(seed): list(turns) for seed, turns in scripts}
        self.default = list(self.script)

    def generate(self, prompts, sampling):
        out = []
        for prompt, sp in zip(prompts, per_prompt(prompts, sampling), strict=True):
            SEEN.append((sp.seed, sp.temperature))
            self.script = self.scripts.get(sp.seed, self.default)
            out += super().generate([prompt], sp)
        return out


ROWS = [{"question": "What is 12*34?", "answer": "408"}, {"question": "What is 7+8?", "answer": "15"}]
SEED = 0
HANG = chain_seed(SEED, 0, 1)  # group 0, chain 1: its first run calls the hung tool
SCRIPTS = [
    [chain_seed(SEED, 0, 0), [answer("408")]],
    [HANG, [call("test_failures_hang", {}), answer("0")]],
    [chain_seed(SEED, 0, 1, attempt=1), [answer("408")]],
    [chain_seed(SEED, 0, 2), ['<tool_call>\n{"name": "calculator", "arguments": {"expression": 12}}\n</tool_call>', answer("0")]],
    [chain_seed(SEED, 0, 3), [answer("408")]],
    [chain_seed(SEED, 1, 0), [answer("15")]],
    [chain_seed(SEED, 1, 1), [answer("0")]],
    [chain_seed(SEED, 1, 2), [answer("15")]],
    [chain_seed(SEED, 1, 3), [answer("0")]],
]


@pytest.fixture(scope="module")
def loop(tmp_path_factory):
    model = build_tiny_model(tmp_path_factory.mktemp("tiny"))
    pool = EnginePool(
        "test_failures_seeded", 0,
        engine_kwargs={"model": str(model), "script": [answer("0")], "scripts": SCRIPTS},
    )
    tools = [get_tool(t) for t in ("answer", "calculator", "test_failures_hang")]
    yield AgentLoop(
        engine=pool, tokenizer=pool.tokenizer, template=get_template("qwen2.5"),
        agent=get_agent("hermes", tools), reward="test_failures_exact", max_turns=2, num_chains=4,
        max_tokens=256, seed=SEED,
    )
    pool.shutdown()


def rollout(loop: AgentLoop, policy: str):
    dm = RolloutDataModule(lambda: None, failed_chains=policy, max_resamples=2)
    dm.session = SimpleNamespace(loop=loop, tokenizer=loop.tokenizer)
    SEEN.clear()
    return dm.rollout(list(enumerate(ROWS)))


def test_a_rollout_resamples_the_chain_a_hung_tool_broke(loop):
    batch = rollout(loop, "resample")
    rewards = batch.token_level_scores.sum(-1).tolist()
    assert rewards == [1, 1, 0, 1, 1, 0, 1, 0]  # the re-run answered; the malformed call stays 0
    assert batch.index.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    adv, _ = get_estimator("grpo")(
        token_level_rewards=batch.token_level_rewards, response_mask=batch.response_mask,
        index=batch.index,
    )
    first = adv[:, 0].tolist()  # every sampled token of a row has its chain's advantage
    assert first == pytest.approx(by_hand([1, 1, 0, 1]) + by_hand([1, 0, 1, 0]))
    metrics = batch.rollout_metrics
    assert metrics["rollout/failed_chains/tool_timeout"] == 1
    assert metrics["rollout/resampled_chains"] == 1 and metrics["rollout/dropped_groups"] == 0
    # one re-run (one turn), with a seed no chain of its group had used
    firsts = {chain_seed(SEED, g, k) for g in (0, 1) for k in range(4)}
    assert [s for s, _ in SEEN if s not in firsts] == [HANG + RESEED_STRIDE]
    assert chain_seed(SEED, 0, 1, attempt=1) == HANG + RESEED_STRIDE


def test_a_rollout_drops_the_group_a_hung_tool_broke(loop):
    batch = rollout(loop, "drop")
    assert batch.index.tolist() == [1, 1, 1, 1]
    assert batch.token_level_scores.sum(-1).tolist() == [1, 0, 1, 0]
    assert batch.rollout_metrics["rollout/dropped_groups"] == 1
    assert batch.rollout_metrics["rollout/resampled_chains"] == 0


class Once:
    """Re-runs the first run of chains 1 and 4 (the greedy baseline) of each group, once."""

    def start(self, chains: int, deadlines: dict[str, float] | None = None) -> None:
        pass

    def rerun(self, traj: Trajectory, attempt: int, seconds: float) -> bool:
        return attempt == 0 and traj.chain_index in (1, 4)


def test_a_greedy_baseline_chain_reruns_greedily(loop):
    SEEN.clear()
    chains, baselines = loop.run_with_baselines(ROWS[:1], retry=Once())
    assert [(t.group_id, t.chain_index) for t in chains + baselines] == [(0, k) for k in range(5)]
    assert SEEN.count((None, 0.0)) == 2  # the baseline's one-turn run, twice, greedily
    assert (chain_seed(SEED, 0, 1, 1), 1.0) in SEEN  # chain 1's re-run, with its attempt's seed
