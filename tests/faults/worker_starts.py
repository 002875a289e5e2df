"""Plug-ins whose import misbehaves in the tool/reward worker processes only (their fork server,
or a worker started from scratch), for :mod:`tests.faults.test_hung_tool`; in the trainer they
import as usual, so the run starts.

- ``WORKER_START=slow``: the first import in a worker process takes ``SLOW_START_S`` seconds (6;
  the file ``WORKER_START_MARKER`` says it happened), later ones none: a start late on a loaded
  machine, which the pool tries again.
- ``WORKER_START=broken``: every import in a worker process raises ``ImportError`` (a dependency
  installed for the trainer only), which stops the run.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

IN_A_WORKER = os.path.basename(sys.argv[0]) in ("forkserver_main.py", "worker_main.py")

if IN_A_WORKER and os.environ.get("WORKER_START") == "broken":
    raise ImportError("No module named 'fancy_dependency' (tests.faults.worker_starts)")

if IN_A_WORKER and os.environ.get("WORKER_START") == "slow":
    marker = Path(os.environ["WORKER_START_MARKER"])
    if not marker.exists():
        marker.touch()
        time.sleep(float(os.environ.get("SLOW_START_S", "6")))
