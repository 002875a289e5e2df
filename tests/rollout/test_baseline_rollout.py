"""Greedy baseline chains (ReMax): rolled out beside the sampled chains, one per prompt, scored
by the same reward, handed over as ``reward_baselines`` and never trained on."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from agentfly.core.trajectory import Trajectory
from agentfly.models.tiny import build_tiny_model
from agentfly.rollout.agent_loop import AgentLoop
from agentfly.rollout.agents import get_agent
from agentfly.rollout.collate import collate_baselines
from agentfly.rollout.datamodule import RolloutDataModule
from agentfly.rollout.engines import EnginePool
from agentfly.rollout.templates import get_template
from agentfly.rollout.tools import get_tool

ROWS = [{"question": "What is 1+2?", "answer": "3"}, {"question": "What is 3+4?", "answer": "7"}]


def checksum(prediction: str) -> float:
    return (sum(map(ord, prediction)) % 101 + 1) / 101


@pytest.fixture(scope="module")
def loop(tmp_path_factory):
    model = build_tiny_model(tmp_path_factory.mktemp("baseline"), initializer_range=0.2)
    pool = EnginePool("transformers", 0, engine_kwargs={"model": str(model), "device": "cpu"})
    yield AgentLoop(
        engine=pool, tokenizer=pool.tokenizer, template=get_template("qwen2.5"),
        agent=get_agent("hermes", [get_tool("calculator")]), reward=checksum,
        num_chains=2, max_turns=1, max_tokens=8, seed=7,
    )
    pool.shutdown()


def test_greedy_chains_ride_along_without_changing_the_sampled_ones(loop):
    chains, baselines = loop.run_with_baselines(ROWS, group_offset=10)
    alone = loop.run(ROWS, group_offset=10)
    greedy = loop.run(ROWS, num_chains=1, greedy=True, group_offset=10)
    # the sampled chains are those of a rollout without baselines (seeded per chain) ...
    assert [t.response_ids for t in chains] == [t.response_ids for t in alone]
    assert [(t.group_id, t.chain_index) for t in chains] == [(10, 0), (10, 1), (11, 0), (11, 1)]
    # ... and each baseline is the greedy chain of its prompt, with its own chain index
    assert [b.response_ids for b in baselines] == [g.response_ids for g in greedy]
    assert [(b.group_id, b.chain_index) for b in baselines] == [(10, 2), (11, 2)]
    assert [b.reward for b in baselines] == [checksum(g.final_response) for g in greedy]
    assert all(len(b.response_ids) > 0 for b in baselines)


def traj(group: int, chain: int, reward: float | None) -> Trajectory:
    t = Trajectory(prompt_ids=[5, 6], group_id=group, chain_index=chain, reward=reward)
    t.append_sampled([7, 8], [-1.0, -1.0])
    return t


def test_collate_baselines_gives_each_chain_its_prompts_greedy_reward():
    chains = [traj(4, 0, 1.0), traj(3, 0, 0.0), traj(4, 1, 0.5), traj(3, 1, 0.2)]
    baselines = [traj(3, 2, 0.25), traj(4, 2, None)]  # an unscored greedy chain counts 0
    assert collate_baselines(chains, baselines).tolist() == [0.0, 0.25, 0.0, 0.25]
    with pytest.raises(ValueError, match=r"group\(s\) \[4\]"):
        collate_baselines(chains, baselines[:1])


class FakeLoop:
    """Records which rollout the data module asked for."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def run(self, rows, *, prompt_key=None, group_offset=0, num_chains=None, greedy=False, **kw):
        self.calls.append("greedy" if greedy else "run")
        n = num_chains or 2
        return [traj(group_offset + i, k, 0.1 * k) for i in range(len(rows)) for k in range(n)]

    def run_with_baselines(self, rows, *, prompt_key=None, group_offset=0, retry=None):
        self.calls.append("with_baselines")
        chains = self.run(rows, group_offset=group_offset)
        self.calls.pop()
        return chains, [traj(group_offset + i, 2, 0.5 + i) for i in range(len(rows))]


def data_module(greedy_baselines: bool, **kw) -> tuple[RolloutDataModule, FakeLoop]:
    fake = FakeLoop()
    session = SimpleNamespace(loop=fake, tokenizer=SimpleNamespace(pad_token_id=0, decode=lambda ids, **_: " ".join(map(str, ids))))
    # 4 prompts per iteration over both ranks: 2 on each
    dm = RolloutDataModule(
        lambda: session, train_files=[], train_batch_size=4, greedy_baselines=greedy_baselines, **kw
    )
    dm.session = session
    return dm, fake


def test_the_data_module_hands_over_baselines_only_when_asked(tmp_path):
    dm, fake = data_module(greedy_baselines=True, trajectory_dir=str(tmp_path))
    # rank 1 of 2 at iteration 3 rolls out groups (3 * 2 + 1) * 2 = 14 and 15
    module = SimpleNamespace(iteration=3)
    dm.trainer = SimpleNamespace(global_rank=1, world_size=2, lightning_module=module)
    batch = dm.rollout(list(enumerate(ROWS)))
    assert fake.calls == ["with_baselines"]
    assert batch.index.tolist() == [14, 14, 15, 15]  # the greedy chains are not in the batch
    assert torch.equal(batch.reward_baselines, torch.tensor([0.5, 0.5, 1.5, 1.5]))
    assert batch.rollout_metrics["rollout/reward_baseline/mean"] == pytest.approx(1.0)
    assert batch.rollout_metrics["rollout/chains"] == 4
    [line] = (tmp_path / "rollouts_rank1.jsonl").read_text().splitlines()
    record = json.loads(line)
    assert record["baseline_rewards"] == [0.5, 1.5] and record["chains"] == 4

    dm, fake = data_module(greedy_baselines=False)
    batch = dm.rollout(list(enumerate(ROWS)))
    assert fake.calls == ["run"]
    assert batch.reward_baselines is None
    assert "rollout/reward_baseline/mean" not in batch.rollout_metrics


def test_validation_rolls_out_no_baselines():
    dm, fake = data_module(greedy_baselines=True)
    dm.validate_rollout(list(enumerate(ROWS)))
    assert fake.calls == ["greedy"]
