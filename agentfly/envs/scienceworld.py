"""ScienceWorld: 30 science tasks in a text simulator (a Java program behind the ``scienceworld``
package; it needs a Java runtime, Debian's ``openjdk-17-jre-headless``).

A task row names the task (``task_name``, one of :meth:`ScienceWorldEnv.task_names`) and its
variation (``variation``, or AgentFly's ``variation_idx``); each task's variations are split into
train, dev and test. :func:`variation_rows` makes rows (``question``: the task's description and
the first observation)::

    python -m agentfly.envs.scienceworld make-data --tasks find-living-thing,boil \
        --split train --limit 10 --out data/scienceworld/train.json

Reward: the task's score gained by the step, over 100, counted from 0, so the episode's return is
the final score over 100 and a completed task returns 1.0. Some tasks start with part of the score
(find-living-thing with the easy simplifications starts at 8): the first step is credited with it.
ScienceWorld's own per-step reward is not used: it leaves out that starting score. A failed task
drops the score to -100 and ends the episode. ``terminated`` when ScienceWorld says the episode is done; ScienceWorld's
own step limit is set out of reach so that ``max_steps`` alone truncates. The info of ``reset``
has the ``goal`` (the task description), ``admissible_actions`` (ScienceWorld's valid actions)
and ``walkthrough`` (the gold action sequence).

The simulator is reached over py4j's socket. A call that loses it (``Py4JNetworkError``), or
fails with the Java process gone (killed, out of memory), is the environment crashing:
:class:`~agentfly.envs.base.EnvCrashed`, counted ``env_crashed`` as a dead environment process
is; an exception of the simulator's own Java code, the process alive, stays the raised error it
is (``env_raised``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from agentfly.envs.base import (
    Env,
    EnvCrashed,
    EnvUnavailable,
    EnvUsageError,
    StepResult,
    register_env,
    require,
)

SPLITS = ("train", "dev", "test")


def _start_scienceworld() -> Any:
    try:
        from scienceworld import ScienceWorldEnv as Simulator
    except ImportError as e:
        raise EnvUnavailable(
            f"the scienceworld environment needs the scienceworld package ({e}); "
            "install agentfly's envs extra: pip install 'agentfly[envs]'"
        ) from e
    import shutil

    if shutil.which("java") is None:
        raise EnvUnavailable(
            "the scienceworld environment needs a Java runtime and no `java` is on PATH; "
            "install one (Debian: apt-get install openjdk-17-jre-headless, or "
            "bash scripts/install_system_packages.sh)"
        )
    return Simulator("", envStepLimit=10**9)


def _exit_code(process: subprocess.Popen | None, within: float = 2.0) -> int | None:
    """The Java process's exit status, None while it runs. ``wait``, not ``poll``: py4j's own
    thread blocks in ``wait`` on it, and ``poll`` answers None while that thread holds the lock."""
    if process is None:
        return None
    try:
        return process.wait(timeout=within)
    except subprocess.TimeoutExpired:
        return None


@register_env("scienceworld")
class ScienceWorldEnv(Env):
    """A ScienceWorld task variation per episode.

    Args:
        simplification: ScienceWorld's simplifications (``"easy"``, or a comma-separated list
            such as ``"teleportAction,openDoors"``; ``""`` for none, as AgentFly plays it).
        max_steps: steps after which the episode is truncated.
    """

    def __init__(self, simplification: str = "", max_steps: int | None = 100) -> None:
        super().__init__(max_steps=max_steps)
        self.simplification = simplification
        self._sim = _start_scienceworld()
        self._score = 0.0
        self._loaded: tuple[str, int] | None = None

    @contextlib.contextmanager
    def _java(self, method: str) -> Iterator[None]:
        """Calls on the simulator in ``method``: a lost Java process raised as :class:`EnvCrashed`."""
        try:
            yield
        except Exception as e:
            from py4j.protocol import Py4JError, Py4JJavaError, Py4JNetworkError

            if not isinstance(e, Py4JError) or isinstance(e, Py4JJavaError):  # the JVM answered
                raise
            code = _exit_code(getattr(getattr(self._sim, "_gateway", None), "java_process", None))
            if code is None and not isinstance(e, Py4JNetworkError):
                raise
            if code is None:
                how = "no longer answers"
            elif code < 0:
                how = f"was killed by signal {signal.Signals(-code).name}"
            else:
                how = f"exited with code {code}"
            raise EnvCrashed(
                f"scienceworld: its Java process {how} during {method}() ({type(e).__name__}: {e})"
            ) from e

    def task_names(self) -> list[str]:
        with self._java("task_names"):
            return list(self._sim.get_task_names())

    def variations(self, task_name: str, split: str) -> list[int]:
        """The variation numbers of ``task_name`` in ``split`` (train, dev or test)."""
        if split not in SPLITS:
            raise EnvUsageError(f"scienceworld: split must be one of {SPLITS}, got {split!r}")
        self._load(task_name, 0)
        with self._java("variations"):
            return list(getattr(self._sim, f"get_variations_{split}")())

    def _load(self, task_name: str, variation: int) -> None:
        if task_name not in self.task_names():
            raise EnvUsageError(f"scienceworld: unknown task {task_name!r} (known: {', '.join(self.task_names())})")
        if (task_name, variation) != self._loaded:
            with self._java("load"):
                self._sim.load(task_name, variation, self.simplification, generateGoldPath=True)
            self._loaded = (task_name, variation)

    def _reset(self, task: dict[str, Any], seed: int | None) -> tuple[str, dict[str, Any]]:
        task_name = str(require(task, "task_name", self.name))
        variation = task.get("variation", task.get("variation_idx"))
        if variation is None:
            raise EnvUsageError("scienceworld: the task row needs a 'variation' (or 'variation_idx') field")
        self._load(task_name, int(variation))
        with self._java("reset"):
            observation, info = self._sim.reset()
            walkthrough = list(self._sim.get_gold_action_sequence())
        self._score = 0.0  # the starting score is credited on the first step
        return observation, {
            "goal": info["taskDesc"], "score": info["score"] / 100, "admissible_actions": list(info["valid"]),
            "walkthrough": walkthrough, "task_name": task_name, "variation": int(variation),
        }

    def _step(self, action: str) -> StepResult:
        with self._java("step"):
            observation, _, done, info = self._sim.step(action)
        score = info["score"] / 100
        reward, self._score = score - self._score, score
        return StepResult(observation, reward, terminated=bool(done), info={
            "score": score, "won": score >= 1.0, "admissible_actions": list(info["valid"]),
        })

    def close(self) -> None:
        if self._sim is not None:
            self._sim.close()
            self._sim = None


def variation_rows(
    task_names: list[str], split: str, simplification: str = "", limit: int | None = None
) -> list[dict[str, Any]]:
    """Task rows for the variations of ``task_names`` in ``split`` (the first ``limit`` of each),
    each ``question`` the task's description and its first observation (starts one simulator)."""
    env = ScienceWorldEnv(simplification=simplification)
    rows = []
    try:
        for name in task_names:
            for variation in env.variations(name, split)[:limit]:
                observation, info = env.reset({"task_name": name, "variation": variation})
                rows.append({"question": f"{info['goal']}\n\n{observation}".strip(), "task_name": name,
                             "variation": variation, "split": split})
    finally:
        env.close()
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="ScienceWorld task rows.")
    commands = parser.add_subparsers(dest="command", required=True)
    rows = commands.add_parser("make-data", help="a row per variation of the tasks in a split")
    rows.add_argument("--tasks", required=True, help="comma-separated task names")
    rows.add_argument("--split", default="train", choices=SPLITS)
    rows.add_argument("--limit", type=int, default=None, help="variations per task at most")
    rows.add_argument("--simplification", default="")
    rows.add_argument("--out", required=True, help="a JSON file")
    args = parser.parse_args(argv)
    made = variation_rows(args.tasks.split(","), args.split, args.simplification, args.limit)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(made, indent=1))
    print(f"{len(made)} rows in {out}")


if __name__ == "__main__":
    main()
