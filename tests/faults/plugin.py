"""Faulty user code for the fault-injection tests, loaded as a run's plug-in
(``agent.init_config.plugins=[tests.faults.plugin]``).

- Tools, each called once per chain in the first turn by the ``fault_script`` engine:
  ``fault_hang`` never returns, ``fault_exit`` kills its process (``os._exit(3)``),
  ``fault_alloc`` allocates 6 GiB, ``fault_huge`` returns a 100 MB string and ``fault_ok``
  answers ``x + 1`` (the call that shows later calls still run). With bubblewrap, the script also
  has the sandboxed ``code_interpreter`` try to kill its parent and write outside.
- The reward ``fault_reward`` fails differently by chain: chain 0 of every group hangs, chain 1
  returns 1e308 (finite in float64, beyond float32), chain 2 raises, chain 3 scores 1.
- At exit the trainer process writes its peak resident memory (``VmHWM``, kB) to the file named
  by ``FAULTS_REPORT``.
"""

from __future__ import annotations

import atexit
import json
import os
import time
from pathlib import Path

from agentfly.rollout.engines.base import register_engine
from agentfly.rollout.engines.scripted import ScriptedEngine
from agentfly.rollout.rewards import reward
from agentfly.rollout.tools import tool

SANDBOX_ESCAPE = (
    "import os\n"
    "try:\n"
    "    open('/root/.bashrc', 'a').write('escaped\\n')\n"
    "except OSError as e:\n"
    "    print('write refused', type(e).__name__)\n"
    "os.kill(os.getppid(), 9)\n"
    "print('parent killed?')\n"
)


def _call(name: str, **args) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


def first_turn(with_sandbox: bool) -> str:
    calls = [_call("fault_hang"), _call("fault_exit"), _call("fault_alloc"), _call("fault_huge"),
             _call("fault_ok", x=41)]
    if with_sandbox:
        calls.append(_call("code_interpreter", code=SANDBOX_ESCAPE))
    return "\n".join(calls)


@register_engine("fault_script")
class FaultScript(ScriptedEngine):
    """Turn 1 calls every faulty tool; turn 2 answers."""

    def __init__(self, model, **kwargs) -> None:
        kwargs.pop("script", None)
        with_sandbox = os.environ.get("FAULTS_SANDBOX") == "1"
        script = [first_turn(with_sandbox), _call("answer", answer="3")]
        super().__init__(model, script=script, **kwargs)


@tool(timeout=2.0)
def fault_hang() -> str:
    """Never returns."""
    while True:
        time.sleep(1)


@tool(timeout=5.0)
def fault_exit() -> str:
    """Kills the process it runs in."""
    os._exit(3)


@tool(timeout=5.0)
def fault_alloc() -> str:
    """Allocates (and touches) 6 GiB."""
    block = bytearray(6 * 2**30)
    return str(len(block))


@tool(timeout=5.0)
def fault_huge() -> str:
    """Returns 100 MB of text."""
    return "x" * 100_000_000


@tool(timeout=5.0)
def fault_ok(x: int) -> str:
    """Answers x + 1.

    Args:
        x: a number.
    """
    return str(x + 1)


@reward(name="fault_reward", timeout=2.0)
def fault_reward(trajectory=None) -> float:
    """Hangs, overflows float32, raises or scores 1, by chain index."""
    kind = trajectory.chain_index % 4
    if kind == 0:
        while True:
            time.sleep(1)
    if kind == 1:
        return 1e308
    if kind == 2:
        raise RuntimeError("fault_reward: a broken reward")
    return 1.0


def _report() -> None:
    path = os.environ.get("FAULTS_REPORT")
    if not path:
        return
    status = Path("/proc/self/status").read_text()
    peak = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:"))
    Path(path).write_text(json.dumps({"peak_rss_kb": peak, "pid": os.getpid()}))


atexit.register(_report)
