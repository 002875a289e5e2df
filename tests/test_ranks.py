"""`fail_together` on a real two-rank gloo group: a failure on one rank stops every rank, naming it."""

from __future__ import annotations

from datetime import timedelta

import pytest
import torch
import torch.multiprocessing as mp

from agentfly.core.ranks import fail_together

# step → the ranks whose step fails
FAILING = {0: (), 1: (1,), 2: (0, 1)}


def _rank(rank: int, world: int, store: str, out: dict) -> None:
    torch.distributed.init_process_group(  # a broken exchange fails in a minute, not gloo's 30
        "gloo", init_method=f"file://{store}", rank=rank, world_size=world, timeout=timedelta(seconds=60)
    )
    try:
        for step, failing in FAILING.items():  # the group goes on after each step, failed or not
            error = ValueError(f"boom on {rank}") if rank in failing else None
            try:
                fail_together(error, f"step {step}")
                out[rank, step] = ("returned", "", [])
            except Exception as raised:  # reported to the parent
                out[rank, step] = (type(raised).__name__, str(raised), list(getattr(raised, "__notes__", [])))
    finally:
        torch.distributed.destroy_process_group()


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    store = tmp_path_factory.mktemp("ranks") / "store"
    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(_rank, args=(2, str(store), out), nprocs=2, join=True)
        return dict(out)


def test_no_failure_returns_on_every_rank(outcomes):
    assert outcomes[0, 0] == outcomes[1, 0] == ("returned", "", [])


def test_one_failed_rank_stops_every_rank_naming_it(outcomes):
    kind, message, _ = outcomes[0, 1]
    assert kind == "PeerRankFailedError"
    assert "step 1 failed on 1 of 2 ranks" in message and "rank 1: ValueError: boom on 1" in message
    assert outcomes[1, 1] == ("ValueError", "boom on 1", [])  # its own error, nothing to add


def test_several_failed_ranks_each_raise_their_own_error_noting_the_others(outcomes):
    assert outcomes[0, 2] == ("ValueError", "boom on 0", ["step 2 failed on other ranks too: rank 1: ValueError: boom on 1"])
    assert outcomes[1, 2] == ("ValueError", "boom on 1", ["step 2 failed on other ranks too: rank 0: ValueError: boom on 0"])


def test_without_a_process_group_the_error_is_raised_as_is():
    error = ValueError("alone")
    with pytest.raises(ValueError) as raised:
        fail_together(error, "step")
    assert raised.value is error and not getattr(raised.value, "__notes__", [])
    fail_together(None, "step")  # nothing to do, nothing raised
