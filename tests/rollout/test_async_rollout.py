"""Rolling out ahead of the update (trainer.rollout_mode): the policy version of every sampled
token, the staleness bound the producer keeps, and the refusal of a chain beyond it."""

from __future__ import annotations

import json
import threading
import time
from types import SimpleNamespace

import pytest
import torch

from agentfly.core.trajectory import ToolCallRecord, Trajectory
from agentfly.rollout.collate import collate_trajectories
from agentfly.rollout.datamodule import RolloutDataModule
from agentfly.rollout.failures import failure_reason
from agentfly.rollout.handover import staleness_metrics
from agentfly.rollout.producer import Produced, RolloutProducer, lead, staleness, too_stale
from tests.rollout.scripted_loops import ROWS, call, make_loop


def test_every_sampled_token_carries_the_version_of_the_weights_that_sampled_it(model_dir):
    """Turn 1 is sampled before a weight push named version 7, turn 2 after it: the chain's
    sampled tokens carry 0 then 7, tool observations -1, and the batch keeps them per token."""
    loop = make_loop(model_dir, [call("calculator", expression="12*34"), call("answer", answer="408")])
    host = loop.engine._hosts[0]
    original = host.generate

    def generate_then_push(prompts, sampling):
        out = original(prompts, sampling)
        if host.weights_version == 0:  # the next turn runs on new weights, as after an update
            host.load_weights({}, version=7)
        return out

    host.generate = generate_then_push
    (traj,) = loop.run(ROWS[:1], num_chains=1)
    assert traj.num_turns == 2 and traj.reward == 1.0
    turns = [(t, v) for t, v, m in zip(traj.turn_ids, traj.policy_versions, traj.loss_mask, strict=True) if m]
    assert {v for t, v in turns if t == 0} == {0}
    assert {v for t, v in turns if t == 1} == {7}
    unsampled = {v for v, m in zip(traj.policy_versions, traj.loss_mask, strict=True) if not m}
    assert unsampled == {-1}
    batch = collate_trajectories([traj], pad_id=0)
    r = len(traj.response_ids)
    assert batch.policy_version[0, :r].tolist() == [v if m else -1 for v, m in zip(traj.policy_versions, traj.loss_mask, strict=True)]
    assert (batch.policy_version[batch.response_mask == 0] == -1).all()


def test_a_weight_push_names_the_version_the_samples_carry(model_dir):
    loop = make_loop(model_dir, [call("answer", answer="15")])
    loop.engine.update_weights({}, version=12)
    (traj,) = loop.run(ROWS[1:], num_chains=1)
    assert set(traj.sampled_versions) == {12}


def _traj(group: int, chain: int, versions: list[int]) -> Trajectory:
    t = Trajectory(prompt_ids=[1], group_id=group, chain_index=chain)
    for v in versions:
        t.append_sampled([5], [-0.5], v)
        t.append_observation([6])
    return t


def test_staleness_is_counted_from_the_oldest_sampled_token():
    t = _traj(0, 0, [3, 5])
    assert staleness(t, 6) == 3  # 6 - 3: the observation tokens' -1 does not count
    assert staleness(Trajectory(prompt_ids=[1]), 6) is None


def test_a_too_stale_chain_refuses_its_whole_group():
    trajs = [_traj(0, 0, [4]), _traj(0, 1, [2]), _traj(1, 0, [4]), _traj(1, 1, [3])]
    # training version 5, bound 2: version 2 is 3 behind (refused), 3 is exactly 2 (kept)
    assert too_stale(trajs, 5, 2) == {0}
    assert too_stale(trajs, 5, 3) == set()
    assert too_stale(trajs, 6, 2) == {0, 1}


def test_the_data_module_rolls_a_refused_group_out_again_and_counts_it():
    """Iteration 3 of a run at policy version 5, bound 1: group 7 (row 1) holds a chain sampled by
    version 3, so both its chains are replaced by a fresh rollout of the same row and group id;
    group 6 (versions 4) is kept as it was."""
    dm = RolloutDataModule(lambda: None, train_batch_size=2, rollout_mode="async", max_staleness=1)
    rolled = []

    class Loop:
        def run(self, rows, prompt_key=None, group_offset=0, retry=None):
            rolled.append((rows, group_offset))
            return [_traj(group_offset, c, [5]) for c in range(2)]

    dm.session = SimpleNamespace(loop=Loop())
    items = [(10, {"q": "a"}), (11, {"q": "b"})]
    kept = [_traj(6, 0, [4]), _traj(6, 1, [4])]
    produced = Produced(3, items, [*kept, _traj(7, 0, [4]), _traj(7, 1, [3, 4])])
    assert dm.train_rollouts.refuse_stale(produced, current=5) == 2
    assert rolled == [([{"q": "b"}], 7)]  # the refused group's row, under its own group id
    assert produced.trajs[:2] == kept
    assert [(t.group_id, t.chain_index, t.sampled_versions) for t in produced.trajs[2:]] == [(7, 0, [5]), (7, 1, [5])]


def _timed_out(t: Trajectory) -> Trajectory:
    """``t`` with a tool call past the harness's deadline: a chain the infrastructure failed."""
    t.tool_calls = [ToolCallRecord("calc", {}, "Error: timeout", ok=False, error="timeout")]
    t.reward = 0.0
    return t


def _refusing_module(policy: str, reruns: list, trajectory_dir: str | None = None) -> RolloutDataModule:
    """Iteration 3 at version 5, bound 1, batch of rows 10 and 11 (groups 6 and 7): the fresh
    rollout of a refused group has chain 1 failed by a hung tool; a re-run answers (re-run in its
    place as the agent loop does when ``retry`` asks for it)."""
    dm = RolloutDataModule(
        lambda: None, train_batch_size=2, rollout_mode="async", max_staleness=1,
        failed_chains=policy, max_resamples=1, trajectory_dir=trajectory_dir,
    )

    class Loop:
        def run(self, rows, prompt_key=None, group_offset=0, retry=None):
            chains = [_traj(group_offset, c, [5]) for c in range(2)]
            _timed_out(chains[1])
            if retry is not None:
                retry.start(len(chains))
                for c, t in enumerate(chains):
                    attempt = 0
                    while retry.rerun(t, attempt, 0.0):
                        reruns.append([(t.group_id, t.chain_index)])
                        t, attempt = _traj(t.group_id, t.chain_index, [5]), attempt + 1
                    chains[c] = t
            return chains

    dm.session = SimpleNamespace(loop=Loop())
    return dm


def test_a_failed_chain_of_a_group_rolled_out_again_is_resampled_not_trained_on():
    reruns: list = []
    dm = _refusing_module("resample", reruns)
    kept = [_traj(6, 0, [4]), _traj(6, 1, [4])]
    produced = Produced(3, [(10, {"q": "a"}), (11, {"q": "b"})],
                        [*kept, _traj(7, 0, [3]), _traj(7, 1, [4])],
                        metrics={"rollout/failed_chains": 2.0, "rollout/resampled_chains": 2.0})
    assert dm.train_rollouts.refuse_stale(produced, current=5) == 2
    assert reruns == [[(7, 1)]]  # the failed fresh chain alone, re-run once
    assert [failure_reason(t) for t in produced.trajs] == [None] * 4
    assert [(t.group_id, t.chain_index) for t in produced.trajs] == [(6, 0), (6, 1), (7, 0), (7, 1)]
    # the first rollout's counts and the new ones add up
    assert produced.metrics["rollout/failed_chains"] == 3
    assert produced.metrics["rollout/failed_chains/tool_timeout"] == 1
    assert produced.metrics["rollout/resampled_chains"] == 3


def test_a_group_rolled_out_again_that_fails_is_dropped_and_its_row_recorded(tmp_path):
    dm = _refusing_module("drop", [], trajectory_dir=str(tmp_path))
    kept = [_traj(6, 0, [4]), _traj(6, 1, [4])]
    produced = Produced(3, [(10, {"q": "a"}), (11, {"q": "b"})],
                        [*kept, _traj(7, 0, [3]), _traj(7, 1, [4])])
    assert dm.train_rollouts.refuse_stale(produced, current=5) == 2
    assert produced.trajs == kept
    assert produced.metrics["rollout/dropped_groups"] == 1
    dm.train_rollouts.write_record(produced.items, produced.trajs, [], 5, offset=6)
    record = json.loads((tmp_path / "rollouts_rank0.jsonl").read_text())
    assert record["rows"] == [10, 11] and record["dropped_rows"] == [11]
    assert len(record["rewards"]) == 2


def test_lead_per_mode():
    assert lead("sync", 3) == 0
    assert lead("one_step_off", 3) == 1
    assert lead("async", 3) == 3
    with pytest.raises(ValueError, match="rollout_mode"):
        lead("eager", 1)


@pytest.mark.parametrize("ahead", [1, 2])
def test_the_producer_never_starts_a_rollout_beyond_the_bound(ahead):
    """While the trainer holds iteration k, rollouts up to k + lead start and no further; they are
    handed over in order, once each, and none is rolled out past the run's end."""
    training = [0]
    started: list[tuple[int, int]] = []  # (iteration rolled out, iteration training then)

    def roll(k: int) -> Produced:
        started.append((k, training[0]))
        time.sleep(0.01)
        return Produced(k, [(k, {})], [])

    producer = RolloutProducer(roll, first=0, lead=ahead, last=6)
    try:
        for k in range(6):
            training[0] = k
            produced, _ = producer.take(k)
            assert produced.iteration == k
            time.sleep(0.05)  # the update: rollouts up to k + lead may run meanwhile
        assert [k for k, _ in started] == list(range(6))
        assert all(k - at <= ahead for k, at in started), started
        assert any(k - at == ahead for k, at in started), started  # it did run ahead
        with pytest.raises(RuntimeError, match="already handed over"):
            producer.take(2)
    finally:
        producer.stop()


def test_a_producer_error_reaches_the_trainer_with_the_iteration():
    def roll(k: int) -> Produced:
        raise OSError("engine exploded")

    producer = RolloutProducer(roll, first=4, lead=1)
    with pytest.raises(RuntimeError, match="iteration 4 failed: engine exploded"):
        producer.take(4)
    producer.stop()


def test_one_step_off_pushes_weights_only_after_the_rollout_in_flight():
    """wait_idle returns only once the next iteration's rollout has ended."""
    release = threading.Event()

    def roll(k: int) -> Produced:
        if k == 1:
            release.wait(5)
        return Produced(k, [], [])

    producer = RolloutProducer(roll, first=0, lead=1, last=3)
    try:
        producer.take(0)  # iteration 1 may start now, and blocks until released
        waiter = threading.Thread(target=producer.wait_idle)
        waiter.start()
        waiter.join(0.3)
        assert waiter.is_alive()  # still rolling out iteration 1
        release.set()
        waiter.join(5)
        assert not waiter.is_alive() and producer.buffered == [1]
    finally:
        release.set()
        producer.stop()


def test_staleness_metrics_are_measured_on_sampled_tokens():
    batch = SimpleNamespace(policy_version=torch.tensor([[3, -1, 4], [5, 5, -1]]))
    m = staleness_metrics(batch, current=5)
    assert m == {"rollout/staleness/mean": pytest.approx((2 + 1 + 0 + 0) / 4), "rollout/staleness/max": 2.0}
