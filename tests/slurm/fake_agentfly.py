"""Stands in for `agentfly fit` when tests/slurm/test_sbatch_script.py runs examples/slurm/train.sbatch.

Each rank writes ``$FAKE_OUT/rank.<SLURM_PROCID>.json`` with its argv and SLURM/Ray variables.
Rank 0 also joins the Ray cluster in RAY_ADDRESS and records its nodes and resources. With
``FAKE_WAIT_USR1=1`` every rank first writes ``ready.<rank>`` and waits for SIGUSR1 (as Lightning
would before its checkpoint); rank 0 then runs a Ray task to show the Ray steps survived it.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path

OUT = Path(os.environ["FAKE_OUT"])
RANK = os.environ.get("SLURM_PROCID", "?")
KEYS = (
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_NODEID",
    "SLURM_NTASKS",
    "SLURM_NNODES",
    "SLURM_NTASKS_PER_NODE",
    "SLURM_STEP_ID",
    "RAY_ADDRESS",
    "SLURM_RESTART_COUNT",
)


def main() -> int:
    record: dict = {"argv": sys.argv[1:], "env": {k: os.environ.get(k) for k in KEYS}}
    got_usr1 = threading.Event()
    if os.environ.get("FAKE_WAIT_USR1") == "1":
        signal.signal(signal.SIGUSR1, lambda *_: got_usr1.set())
        (OUT / f"ready.{RANK}").write_text("")
        record["usr1"] = got_usr1.wait(timeout=120)
    if RANK == "0":
        import ray

        ray.init(address=os.environ["RAY_ADDRESS"], logging_level="ERROR", log_to_driver=False)
        record["ray_nodes"] = sum(1 for node in ray.nodes() if node["Alive"])
        record["ray_resources"] = ray.cluster_resources()
        record["ray_task"] = ray.get(ray.remote(lambda: "ran").remote(), timeout=60)
        ray.shutdown()
    (OUT / f"rank.{RANK}.json").write_text(json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
