"""DAPO's dynamic sampling (``algorithm.filter_groups``, :mod:`agentfly.rollout.dynamic_sampling`).

Rows whose kind decides their chains' scores: ``easy`` (every chain 1), ``hard`` (every chain 0)
and ``mixed`` (chain c scores c % 2). The kept groups, the refill prompts and the counts are
derived by hand from the kinds and the draw's rule; checked in every rollout mode, at the bound,
across a resume and on two ranks, then through the agent loop with the real reward.
"""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest

from agentfly.core.trajectory import ToolCallRecord, Trajectory
from agentfly.models.tiny import build_tiny_model
from agentfly.rollout.agent_loop import AgentLoop
from agentfly.rollout.agents import get_agent
from agentfly.rollout.datamodule import RolloutDataModule
from agentfly.rollout.dynamic_sampling import DynamicSamplingError, alike_groups, chain_metric
from agentfly.rollout.engines import EnginePool
from agentfly.rollout.engines.base import per_prompt, register_engine
from agentfly.rollout.engines.scripted import ScriptedEngine
from agentfly.rollout.producer import ROLLOUT_MODES
from agentfly.rollout.templates import get_template
from agentfly.rollout.tools import get_tool
from tests.rollout.scripted_loops import call

# rows 0..11; with 4 prompts a batch and no shuffling, iteration 0 draws rows 0-3, its refills
# 4-7 then 8-11; iteration 1 draws 4-7, its refills 8-11 then 0-3
KINDS = ["easy", "mixed", "hard", "mixed", "mixed", "easy", "mixed", "mixed", "hard", "hard", "mixed", "easy"]
ROWS = [{"question": f"q{i}", "kind": kind} for i, kind in enumerate(KINDS)]
SCORE = {"easy": lambda c: 1.0, "hard": lambda c: 0.0, "mixed": lambda c: float(c % 2)}
ROLL_S = 0.02  # each generation batch's time


class Loop:
    """Two chains a row, scored by the row's kind (``kinds`` overrides it by question), sampled
    by policy ``version``."""

    def __init__(self) -> None:
        self.version = 0
        self.kinds: dict[str, str] = {}
        self.failing: set[str] = set()  # questions whose chain 1 a tool's deadline fails
        self.calls: list[tuple[list[str], int]] = []

    def run(self, rows, prompt_key=None, group_offset=0, retry=None):
        time.sleep(ROLL_S)
        self.calls.append(([r["question"] for r in rows], group_offset))
        out = []
        for i, row in enumerate(rows):
            kind = self.kinds.get(row["question"], row["kind"])
            for c in range(2):
                t = Trajectory(prompt_ids=[1], group_id=group_offset + i, chain_index=c, row=row)
                t.append_sampled([5], [-0.5], self.version)
                t.reward = SCORE[kind](c)
                t.reward_extras = {"acc": t.reward}
                if c == 1 and row["question"] in self.failing:
                    t.tool_calls = [ToolCallRecord("calc", {}, "Error: timeout", ok=False, error="timeout")]
                out.append(t)
        return out

    def run_with_baselines(self, rows, prompt_key=None, group_offset=0, retry=None):
        """The chains, and a greedy chain per row whose reward is its row's index."""
        chains = self.run(rows, prompt_key, group_offset, retry)
        greedy = [Trajectory(prompt_ids=[1], group_id=group_offset + i, chain_index=2,
                             reward=float(ROWS.index(row))) for i, row in enumerate(rows)]
        return chains, greedy


def module(mode: str = "sync", tmp_path=None, *, rows=ROWS, shuffle: bool = False,
           rank: tuple[int, int] = (0, 1), batch_size: int = 4, **kwargs) -> RolloutDataModule:
    kwargs = {"filter_groups_metric": "acc", **kwargs}
    dm = RolloutDataModule(
        lambda: None, train_batch_size=batch_size, shuffle=shuffle, seed=3, rollout_mode=mode,
        max_staleness=1, max_iterations=2, trajectory_dir=str(tmp_path) if tmp_path else None,
        **kwargs,
    )
    dm.rank = lambda: rank
    dm.train_rows = list(rows)
    dm.session = SimpleNamespace(loop=Loop(), tokenizer=SimpleNamespace(pad_token_id=0, eos_token_id=0, decode=lambda ids, **_: " ".join(map(str, ids))))
    dm.train_dataloader()
    return dm


def batch_of(dm: RolloutDataModule, k: int):
    try:
        return dm.train_rollouts.batch(k, dm.draw(k))
    finally:
        if k == 1:
            dm.stop_producer()


def groups(batch) -> list[int]:
    return list(dict.fromkeys(batch.index.tolist()))


@pytest.mark.parametrize("mode", ROLLOUT_MODES)
def test_alike_groups_are_dropped_and_refilled_to_exactly_the_batch_size(mode, tmp_path):
    """Iteration 0: rows 0-3 keep 1 and 3 (0 easy, 2 hard); the refill, rows 4-7, keeps 4, 6 and
    7 (5 easy): five groups, cut to four (7 goes). Group ids: bound J = 12 rows / 4 = 3, so
    generation batch j of iteration k starts at (3k + j)·4. Iteration 1: rows 4-7 keep 4, 6, 7;
    the refill, rows 8-11, keeps 10 (8, 9 hard, 11 easy): four, nothing cut."""
    dm = module(mode, tmp_path)
    first, second = batch_of(dm, 0), None
    metrics = dict(dm.last_rollout)
    second = batch_of(dm, 1)
    assert groups(first) == [1, 3, 4, 6]
    assert groups(second) == [12 + 0, 12 + 2, 12 + 3, 16 + 2]
    assert first.index.numel() == second.index.numel() == 4 * 2  # exactly train_batch_size groups
    assert {k: v for k, v in metrics.items() if k.startswith("rollout/filter_groups/")} == {
        "rollout/filter_groups/gen_batches": 2.0, "rollout/filter_groups/kept_groups": 5.0,
        "rollout/filter_groups/dropped_groups": 3.0, "rollout/filter_groups/trimmed_groups": 1.0,
    }
    assert metrics["timing/rollout_s"] >= 2 * ROLL_S  # the refill's time counts
    records = [json.loads(line) for line in (tmp_path / "rollouts_rank0.jsonl").read_text().splitlines()]
    assert [(r["rows"], r["refill_rows"], r["all_alike_rows"], r["trimmed_rows"], r["dropped_rows"])
            for r in records] == [
        ([0, 1, 2, 3], [4, 5, 6, 7], [0, 2, 5], [7], []),
        ([4, 5, 6, 7], [8, 9, 10, 11], [5, 8, 9, 11], [], []),
    ]


def test_a_group_dropped_for_a_failed_chain_is_refilled_like_a_filtered_one(tmp_path):
    """failed_chains=drop: row 1's group loses a chain to a hung tool and is dropped before the
    filter; rows 3, 4, 6, 7 fill the batch (7 no longer cut)."""
    dm = module(tmp_path=tmp_path, failed_chains="drop")
    dm.session.loop.failing = {"q1"}
    assert groups(batch_of(dm, 0)) == [3, 4, 6, 7]
    assert dm.last_rollout["rollout/dropped_groups"] == 1
    assert dm.last_rollout["rollout/filter_groups/trimmed_groups"] == 0
    record = json.loads((tmp_path / "rollouts_rank0.jsonl").read_text())
    assert (record["dropped_rows"], record["all_alike_rows"], record["trimmed_rows"]) == ([1], [0, 2, 5], [])


def test_greedy_baselines_travel_with_their_groups():
    """ReMax: iteration 0 keeps rows 1, 3, 4, 6 (as above); each chain's baseline is its own
    row's greedy chain, the dropped and cut groups' greedy chains are gone."""
    dm = module(greedy_baselines=True)
    batch = batch_of(dm, 0)
    assert groups(batch) == [1, 3, 4, 6]
    assert batch.reward_baselines.tolist() == [1.0, 1.0, 3.0, 3.0, 4.0, 4.0, 6.0, 6.0]


def test_without_the_filter_nothing_changes():
    dm = module(filter_groups_metric=None)
    batch = batch_of(dm, 1)
    assert groups(batch) == [4, 5, 6, 7]  # (k·world + rank)·4, as before
    assert dm.session.loop.calls == [(["q4", "q5", "q6", "q7"], 4)]
    assert not any(k.startswith("rollout/filter_groups/") for k in dm.last_rollout)


@pytest.mark.parametrize("mode", ROLLOUT_MODES)
@pytest.mark.parametrize(("given", "rolled"), [(2, 2), (0, 3)])
def test_the_bound_stops_the_run_naming_the_key_and_the_counts(mode, given, rolled):
    """Only row 1 is mixed: each generation batch keeps at most it. Bound 2, or 0 (the 12 rows
    hold 3 generation batches of 4): the iteration stops there, one group of four found."""
    rows = [{**r, "kind": "mixed" if i == 1 else "easy"} for i, r in enumerate(ROWS)]
    dm = module(mode, rows=rows, max_num_gen_batches=given)
    with pytest.raises(Exception) as err:  # sync: the error; off sync: the producer's
        batch_of(dm, 0)
    dm.stop_producer()
    said = str(err.value)
    assert isinstance(err.value, DynamicSamplingError) or isinstance(err.value.__cause__, DynamicSamplingError)
    assert f"algorithm.filter_groups.max_num_gen_batches={given}" in said, said
    assert f"{rolled} generation batch(es) of 4 prompts gave 1 of the 4 groups" in said, said
    assert f"({4 * rolled - 1} group(s) scored all alike)" in said, said
    if given == 0:
        assert "(0: as many as the training rows hold, 3)" in said
    assert len(dm.session.loop.calls) >= rolled


def test_a_group_rolled_out_anew_as_too_stale_is_filtered_and_refilled():
    """Iteration 0 rolled out by version 3 (groups 1, 3, 4, 6 after one refill), handed over at
    version 5 with bound 1: every group is refused and rolled out anew; row 3's new chains all
    score alike, so it leaves and generation batch 2 (rows 8-11, from id 8) fills its place with
    row 10 (id 10), on the current weights."""
    dm = module("async")
    loop = dm.session.loop
    loop.version = 3
    produced = dm.train_rollouts.roll(0)
    assert [t.group_id for t in produced.trajs][::2] == [1, 3, 4, 6] and produced.gen_batches == 2
    loop.version, loop.kinds = 5, {"q3": "easy"}
    assert dm.train_rollouts.refuse_stale(produced, current=5) == 8
    assert [t.group_id for t in produced.trajs][::2] == [1, 4, 6, 10]
    assert {v for t in produced.trajs for v in t.sampled_versions} == {5}
    assert produced.gen_batches == 3 and produced.left_out[3] == "all_alike"
    assert loop.calls[-1] == (["q8", "q9", "q10", "q11"], 8)
    assert produced.metrics["rollout/filter_groups/dropped_groups"] == 3 + 1 + 3


def test_a_resumed_run_draws_the_same_prompts_and_group_ids():
    """A fresh module at iteration 2 (a resume) rolls out what the uninterrupted run did: the
    refill rows are a function of (seed, iteration, generation batch), not of the run's past."""
    run = module(shuffle=True)
    produced = [run.train_rollouts.roll(k) for k in range(3)]
    resumed = module(shuffle=True).train_rollouts.roll(2)
    assert resumed.rows.keys() == produced[2].rows.keys()
    assert [i for i, _ in resumed.rows.values()] == [i for i, _ in produced[2].rows.values()]
    assert resumed.left_out == produced[2].left_out and resumed.gen_batches == produced[2].gen_batches
    assert [t.group_id for t in resumed.trajs] == [t.group_id for t in produced[2].trajs]


def test_refills_never_repeat_a_row_of_the_iteration_and_split_over_the_ranks():
    """Two ranks, two prompts each, shuffled: iteration 5's generation batches 0, 1, 2 are
    disjoint, each rank's share of one is disjoint from the other's, and the rows run out after
    12 / 4 = 3 generation batches."""
    ranks = [module(shuffle=True, rank=(r, 2)) for r in range(2)]
    drawn = [[i for dm in ranks for i, _ in dm.draw(5, j)] for j in range(3)]
    assert all(len(d) == len(set(d)) == 4 for d in drawn)
    assert sorted(i for d in drawn for i in d) == list(range(12))
    assert drawn[1] != [i for dm in ranks for i, _ in dm.draw(6, 1)]  # keyed on the iteration
    with pytest.raises(ValueError, match="12 training rows hold 3 batches of 4"):
        ranks[0].draw(5, 3)


def test_each_rank_fills_its_own_share_to_exactly_its_size():
    """Rank 0 draws rows 0, 1 (one mixed), rank 1 rows 2, 3 (one mixed): each refills from its
    share of rows 4-7 (rank 0: 4 and 5, one mixed; rank 1: 6 and 7, both mixed, 7 cut), so both
    train on two groups, with ids of their own."""
    out = []
    for r in range(2):
        dm = module(rank=(r, 2))
        out.append(groups(batch_of(dm, 0)))
    # generation batch j of iteration 0 on rank r starts at (j·2 + r)·2
    assert out == [[1, 4], [3, 6]]


def test_the_metric_reads_the_reward_s_fields():
    t = Trajectory(prompt_ids=[1], reward=0.1, reward_extras={"acc": 0.0, "format": 1.0})
    assert chain_metric(t, "acc") == 0.0 and chain_metric(t, "format") == 1.0
    assert chain_metric(t, "score") == chain_metric(t, "seq_reward") == chain_metric(t, "seq_final_reward") == 0.1
    assert chain_metric(Trajectory(prompt_ids=[1], reward=0.5), "acc") == 0.5  # a bare number
    # a length penalty of -0.25 in the reward: score and acc are the reward function's 1.0
    long = Trajectory(prompt_ids=[1], reward=0.75)
    long.overlong_reward = -0.25
    assert (chain_metric(long, "score"), chain_metric(long, "acc"), chain_metric(long, "seq_reward")) == (1.0, 1.0, 0.75)
    with pytest.raises(DynamicSamplingError, match=r"metric='used_tool'.*\['acc', 'format'\]"):
        chain_metric(t, "used_tool")
    single = Trajectory(prompt_ids=[1], group_id=7, reward=1.0)
    assert alike_groups([single], "seq_reward") == []  # one chain: kept (verl's rule)
    tenths = [Trajectory(prompt_ids=[1], group_id=2, chain_index=c, reward=0.1) for c in range(3)]
    assert alike_groups(tenths, "seq_reward") == [2]  # np.std of these is > 0


# ------------------------------------------------------------------ the config


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from tests.config.plans import write_plan_data

    return write_plan_data(tmp_path_factory.mktemp("filter_groups"))


def test_the_keys_are_refused_where_they_cannot_work(data):
    from agentfly.config import ConfigError
    from agentfly.run.plan import plan_run
    from agentfly.run.topology import Hardware
    from tests.config.plans import base, compose

    on = [*base(data), "algorithm.filter_groups.enable=true"]  # the base has KL in the reward
    with pytest.raises(ConfigError, match=r"filter_groups\.enable=True needs algorithm\.filter_groups\.metric"):
        compose(on)
    with pytest.raises(ConfigError, match=r"metric=seq_final_reward with algorithm\.use_kl_in_reward"):
        compose([*on, "algorithm.filter_groups.metric=seq_final_reward"])
    cfg = compose([*on, "algorithm.filter_groups.metric=acc", "algorithm.filter_groups.max_num_gen_batches=6"])
    with pytest.raises(ConfigError, match=r"max_num_gen_batches=6 .* the 40 training rows .* at most 5"):
        plan_run(cfg, Hardware(gpus=2, cpus=8))
    fine = compose([*on, "algorithm.filter_groups.metric=seq_reward", "algorithm.filter_groups.max_num_gen_batches=5"])
    planned = plan_run(fine, Hardware(gpus=2, cpus=8)).datamodule
    assert (planned["filter_groups_metric"], planned["max_num_gen_batches"]) == ("seq_reward", 5)


# ------------------------------------------------------------------ through the agent loop

ANSWER_1, ANSWER_2 = call("answer", answer="1"), call("answer", answer="2")
# by the question's kind, the reply of an even-seeded chain and of an odd-seeded one (the two
# chains of a group: chain_seed(0, g, c) = 1009·g + c)
REPLIES = {
    "EASY": (ANSWER_1, ANSWER_1), "HARD": (ANSWER_2, ANSWER_2),
    "MIXED": (ANSWER_2, ANSWER_1), "SPLIT": ("\\boxed{1}", ANSWER_1),
}


@register_engine("test_dynamic_sampling_by_question")
class ByQuestion(ScriptedEngine):
    """Replies by the kind the question names and the chain's seed parity (:data:`REPLIES`)."""

    def generate(self, prompts, sampling):
        out = []
        for prompt, sp in zip(prompts, per_prompt(prompts, sampling), strict=True):
            text = self.tokenizer.decode(prompt)
            kind = next(k for k in REPLIES if f"is {k}." in text)
            self.script = [REPLIES[kind][sp.seed % 2]]
            out += super().generate([prompt], sp)
        return out



def test_acc_and_seq_reward_keep_different_groups_through_the_agent_loop(tmp_path):
    """The real reward (math_equal_reward_tool: acc, and 1 / 0.1 / 0 gated on a tool call) over
    a scripted engine that answers by the question and the chain's seed parity. A ``split``
    row's chains are both right, one through the answer tool (reward 1) and one in plain text
    (reward 0): alike by ``acc``, different by ``seq_reward``. Batch of 2, no shuffling:
    ``acc`` drops row 0 (split), refills with rows 2, 3 (easy, split: both dropped) then 4, 5
    (mixed kept); ``seq_reward`` keeps rows 0, 1 at once."""
    rows = [{"question": f"Task {i} is {kind.upper()}.", "answer": "1", "kind": kind}
            for i, kind in enumerate(["split", "mixed", "easy", "split", "mixed", "hard"])]
    pool = EnginePool(
        "test_dynamic_sampling_by_question", 0,
        engine_kwargs={"model": str(build_tiny_model(tmp_path / "tiny")), "script": [ANSWER_1]},
    )
    loop = AgentLoop(
        engine=pool, tokenizer=pool.tokenizer, template=get_template("qwen2.5"),
        agent=get_agent("hermes", [get_tool("answer")]), reward="math_equal_reward_tool",
        max_turns=2, num_chains=2, max_tokens=256, seed=0,
    )
    try:
        for metric, kept, rolled in (("acc", [1, 4], 3), ("seq_reward", [0, 1], 1)):
            dm = module(rows=rows, filter_groups_metric=metric, batch_size=2)
            dm.session.loop = loop
            produced = dm.train_rollouts.roll(0)
            assert [produced.rows[t.group_id][0] for t in produced.trajs][::2] == kept, metric
            assert produced.gen_batches == rolled, metric
    finally:
        pool.shutdown()
