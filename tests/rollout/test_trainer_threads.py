"""The training thread takes the producer's cores while the producer is idle, and gives them back
before a hand-over lets the next rollout start (agentfly/rollout/trainer_threads.py)."""

from __future__ import annotations

import threading

import pytest
import torch
from torch import nn

from agentfly.rollout.producer import Produced, RolloutProducer
from agentfly.rollout.trainer_threads import TrainerThreads
from agentfly.run.plan import plan_run
from agentfly.run.topology import Hardware
from tests.config.plans import base, compose, write_plan_data


class _Record(torch.autograd.Function):
    """Identity that records the thread count its forward and its backward ran with."""

    @staticmethod
    def forward(ctx, x, log, name):
        ctx.log, ctx.name = log, name
        log.append((f"fwd{name}", torch.get_num_threads()))
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        ctx.log.append((f"bwd{ctx.name}", torch.get_num_threads()))
        return grad, None, None


class _Block(nn.Module):
    def __init__(self, name: int, log: list, on_forward=None) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.name, self.log, self.on_forward = name, log, on_forward

    def forward(self, x):
        y = _Record.apply(self.lin(x), self.log, self.name)
        if self.on_forward:
            self.on_forward()
        return y


@pytest.fixture
def threads_restored():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_blocks_run_on_every_core_only_while_the_producer_is_idle(threads_restored):
    """Share 1, idle 2: the rollout ends after block 1's forward; blocks 2 and 3 and the whole
    backward take 2 threads. A hand-over gives them back: the next forward runs on 1 again."""
    idle = [False]
    log: list[tuple[str, int]] = []
    model = nn.Sequential(nn.ModuleList(
        [_Block(i, log, on_forward=(lambda: idle.__setitem__(0, True)) if i == 1 else None) for i in range(4)]
    ))
    torch.set_num_threads(1)
    share = TrainerThreads(share=1, idle=2, producer_idle=lambda: idle[0])
    share.attach(model)

    def run() -> None:
        x = torch.ones(2, 4, requires_grad=True)
        for block in model[0]:
            x = block(x)
        x.sum().backward()

    run()
    assert dict(log) == {"fwd0": 1, "fwd1": 1, "fwd2": 2, "fwd3": 2, "bwd3": 2, "bwd2": 2, "bwd1": 2, "bwd0": 2}

    idle[0] = False  # the producer may start again: the trainer's hand-over comes first
    share.before_hand_over()
    assert torch.get_num_threads() == 1
    log.clear()
    model[0][1].on_forward = None
    run()
    assert {n for _, n in log} == {1}

    idle[0] = True  # a forward on another thread (an engine's) leaves its own count alone
    seen = []
    other = threading.Thread(target=lambda: (torch.set_num_threads(1), run(), seen.append(torch.get_num_threads())))
    other.start()
    other.join(10)
    assert seen == [1] and torch.get_num_threads() == 1

    share.detach()
    log.clear()
    run()  # no hooks: the count stays where detach left it
    assert torch.get_num_threads() == 1 and {n for _, n in log} == {1}


def test_the_backward_pass_takes_the_cores_as_the_gradient_reaches_each_block(threads_restored):
    """The rollout ends during block 3's backward: blocks 2, 1, 0 run their backward on 2."""
    idle = [False]
    log: list[tuple[str, int]] = []

    class Flip(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, grad):
            idle[0] = True
            return grad

    blocks = nn.ModuleList([_Block(i, log) for i in range(4)])
    torch.set_num_threads(1)
    TrainerThreads(share=1, idle=2, producer_idle=lambda: idle[0]).attach(blocks)
    x = torch.ones(2, 4, requires_grad=True)
    for i, block in enumerate(blocks):
        x = block(x)
        if i == 2:
            x = Flip.apply(x)  # between blocks 2 and 3: the flag flips after block 3's backward
    x.sum().backward()
    assert dict(log) == {"fwd0": 1, "fwd1": 1, "fwd2": 1, "fwd3": 1, "bwd3": 1, "bwd2": 2, "bwd1": 2, "bwd0": 2}


def test_the_producer_is_idle_only_when_no_rollout_runs_or_may_start():
    release = threading.Event()
    started = threading.Event()

    def roll(k: int) -> Produced:
        if k == 1:
            started.set()
            release.wait(5)
        return Produced(k, [], [])

    producer = RolloutProducer(roll, first=0, lead=1, last=3)
    try:
        producer.take(0)  # iteration 1 may start now
        assert started.wait(5)
        assert not producer.idle  # iteration 1 in flight
        release.set()
        producer.wait_idle()
        assert producer.idle  # 1 is done; 2 may not start before take(1)
        producer.take(1)
        assert not producer.idle or producer.buffered == [2]  # 2 may start (or already ended)
        producer.take(2)
        producer.wait_idle()
        assert producer.idle  # the run's last rollout is done
    finally:
        release.set()
        producer.stop()


CPU2 = Hardware(gpus=0, cpus=2)


@pytest.mark.parametrize(
    "extra, idle_threads, trainer_threads",
    [
        (["trainer.rollout_mode=one_step_off"], 2, 1),
        (["trainer.rollout_mode=async", "trainer.max_staleness=2"], 2, 1),
        (["trainer.rollout_mode=one_step_off", "trainer.num_threads=1"], None, 1),  # set by hand: kept
        (["trainer.rollout_mode=one_step_off", "actor_rollout_ref.rollout.num_engines=1"], None, 1),
        ([], None, None),  # sync: the two take turns on every core
    ],
)
def test_the_plan_lends_the_cores_only_where_it_split_them(extra, idle_threads, trainer_threads, tmp_path):
    data = write_plan_data(tmp_path)
    plan = plan_run(compose([*base(data), "trainer.device=cpu", "trainer.n_gpus_per_node=1", *extra]), CPU2)
    assert plan.datamodule["idle_threads"] == idle_threads
    assert plan.num_threads == trainer_threads


def test_the_data_module_takes_the_cores_back_before_each_hand_over(threads_restored):
    """one_step_off, share 1, idle 2: the update runs on 1 while the next rollout is in flight and
    on 2 once it ended; the next hand-over (which lets the rollout after it start) runs on 1."""
    from types import SimpleNamespace

    from agentfly.rollout.datamodule import RolloutDataModule

    torch.set_num_threads(1)
    release = threading.Event()
    log: list[tuple[str, int]] = []
    model = nn.ModuleList([_Block(0, log)])
    dm = RolloutDataModule(
        lambda: None, train_batch_size=1, rollout_mode="one_step_off", max_iterations=3,
        producer_threads=1, idle_threads=2,
    )
    dm.trainer = SimpleNamespace(lightning_module=model)
    iteration = [0]
    dm.iteration = lambda: iteration[0]

    def roll(k: int, items=None) -> Produced:
        if k == 1:
            release.wait(5)
        return Produced(k, [(k, {})], [])

    dm.train_rollouts.roll = roll
    dm.train_rollouts.hand_over = lambda produced, waited: (produced.iteration, torch.get_num_threads())
    try:
        assert dm.rollout([(0, {})]) == (0, 1)
        model[0](torch.ones(1, 4))  # the update while iteration 1 rolls out
        release.set()
        dm.wait_rollouts_idle()
        model[0](torch.ones(1, 4))  # the rest of the update: the producer is idle
        assert [n for _, n in log] == [1, 2]
        iteration[0] = 1
        assert dm.rollout([(1, {})]) == (1, 1)  # back to the trainer's share before the hand-over
    finally:
        release.set()
        dm.stop_producer()
    assert torch.get_num_threads() == 1
