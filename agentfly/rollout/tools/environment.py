"""Environments as per-chain resources, and what the tools acting on them share.

An environment tool (:func:`env_tool`) is a stateful tool whose per-chain resource is an
:class:`EnvSession`: one environment of :mod:`agentfly.envs` in a killable process of its own
(:class:`~agentfly.envs.process.ProcessEnv`, under its deadlines; a Java or Stockfish process
dies with it). The tools naming the same environment share one session per chain (ALFWorld's
four tools, chess's three) and its settings (``agent.init_config.tool_config.<tool>.<setting>``
of any of them). The agent loop starts every session when the chain starts (the process, then
``reset`` with the chain's data row, :func:`start_environments`), and the resource pool closes
it when the chain ends, however it ends. The session records the episode (:meth:`EnvSession.record`),
which the loop puts on the trajectory (``Trajectory.environments``) for the reward; each step's
reward rides on its tool call's result (``ToolResult.reward``) to its turn
(``Trajectory.turn_rewards``), and each step's screen (``StepResult.images``, PNG bytes) on its
result's ``images`` to the model. The session keeps the latest screen (of ``reset``, given as
``info["images"]``, or of the last step) for tools that show it without acting
(``capture_screenshot``); the episode's record holds no images.

Who is at fault:

- the environment's: a step past ``step_timeout`` (its process is killed), a process that dies,
  an exception in the environment's code, a call on an environment already failed. The call
  fails with the error kind ``env_<kind>`` (``env_timeout``, ``env_crashed``, ``env_raised``,
  ``env_closed``, ``env_unavailable``; ``env_error`` for anything else on the way) and ends the
  chain (finish reason ``env_failed``); :mod:`agentfly.rollout.failures` counts it as an
  infrastructure failure of that chain. A session that does not start (the process, or
  ``reset`` on the chain's row) fails the chain with :class:`EnvironmentStartError`
  (``env_start``).
- the model's: an action the environment refuses is its observation (the environment says
  why); acting after the episode ended is not possible, as the chain ends with the episode
  (finish reason ``episode_over``).

Departure from AgentFly: AgentFly makes an environment on a chain's first tool call and shows
an environment's exception to the model as its observation (scored as the model's); here it is
made with the chain and its failures are the infrastructure's.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from agentfly.envs.base import EnvError, EnvUsageError, StepResult
from agentfly.rollout.execution.daemon_threads import THREADS
from agentfly.rollout.execution.workers import describe_error, wait_call
from agentfly.rollout.tools.base import Tool, ToolResult, tool

logger = logging.getLogger(__name__)

EPISODE_OVER = "episode_over"
"""The finish reason of a chain whose environment's episode ended (terminated or truncated)."""
ENV_FAILED = "env_failed"
"""The finish reason of a chain whose environment failed during a tool call."""
START_GRACE_S = 15.0
RECORD_TIMEOUT_S = 30.0
#: info keys left out of an episode's record (long lists the tools read from the live session)
BULKY_INFO = ("admissible_actions", "walkthrough", "expert_plan")


class EnvironmentStartError(RuntimeError):
    """A chain's environment did not start (its process, or ``reset`` on the chain's row)."""


@dataclasses.dataclass(frozen=True)
class EnvSettings:
    """Settings every environment tool takes; an environment's own class adds its constructor's.

    Attributes:
        start_timeout: seconds for the environment's process to start and the environment to be made.
        reset_timeout: seconds for one ``reset`` (the chain's start, ``alfworld_reset``).
        step_timeout: seconds for one step; past it the environment's process is killed.
        max_steps: steps after which the episode is truncated (None: no limit of agentfly's own).
    """

    start_timeout: float = 120.0
    reset_timeout: float = 120.0
    step_timeout: float = 60.0
    max_steps: int | None = None

    def __post_init__(self) -> None:
        for name in ("start_timeout", "reset_timeout", "step_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)!r}")
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError(f"max_steps must be at least 1 or null, got {self.max_steps}")

    def env_kwargs(self) -> dict[str, Any]:
        """The environment's constructor arguments: every setting but the deadlines."""
        deadlines = {f.name for f in dataclasses.fields(EnvSettings)} - {"max_steps"}
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in deadlines}

    def longest_call(self) -> float:
        """The longest a call on the environment may take by its own deadlines."""
        return max(self.step_timeout, self.reset_timeout)


def _lean(info: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in info.items() if k not in BULKY_INFO}


class EnvSession:
    """One chain's environment: its process, its episode and the record of it.

    Every member the tools use is a method, so that a session held in a Ray actor (the ``ray``
    resource backend hands the tool a proxy) works alike.

    Args:
        env: the environment's registered name (or ``module:attr`` of an :class:`~agentfly.envs.base.Env`).
        settings: its settings (constructor arguments and deadlines).
    """

    def __init__(self, env: str, settings: EnvSettings) -> None:
        self.env = env
        self.settings = settings
        self._process: Any = None
        self._row: dict[str, Any] = {}
        self._seed: int | None = None
        self._reset_info: dict[str, Any] = {}
        self._info: dict[str, Any] = {}
        self._images: list[bytes] = []
        self._steps: list[dict[str, Any]] = []
        self._resets = 0
        self._over = False

    def start(self, row: Mapping[str, Any], seed: int | None = None) -> str:
        """Start the process (once) and an episode of the task ``row`` describes; returns the
        first observation."""
        if self._process is None:
            from agentfly.envs.process import ProcessEnv

            s = self.settings
            self._process = ProcessEnv.named(
                self.env, s.env_kwargs(), start_timeout=s.start_timeout,
                reset_timeout=s.reset_timeout, step_timeout=s.step_timeout, label=self.env,
            )
        observation, info = self._process.reset(dict(row), seed)
        info = dict(info)
        self._images = list(info.pop("images", None) or [])
        self._row, self._seed = dict(row), seed
        self._reset_info, self._info = dict(info), dict(info)
        self._steps, self._over = [], False
        self._resets += 1
        return observation

    def restart(self) -> str:
        """A new episode of the same task (``alfworld_reset``)."""
        return self.start(self._row, self._seed)

    def step(self, action: str) -> StepResult:
        """Play ``action``; raises :class:`~agentfly.envs.base.EnvUsageError` once the episode
        is over, and the environment's failures as their :class:`~agentfly.envs.base.EnvError`."""
        if self._process is None:
            raise EnvUsageError(f"{self.env}: the environment was not started")
        if self._over:
            raise EnvUsageError(f"{self.env}: the episode is over")
        began = time.time()
        result = self._process.step(action)
        self._info, self._over = dict(result.info), result.done
        self._images = list(result.images)
        self._steps.append({
            "action": action, "reward": float(result.reward), "terminated": bool(result.terminated),
            "truncated": bool(result.truncated), "info": _lean(result.info),
            "at": began, "seconds": time.time() - began,
        })
        return result

    def info(self) -> dict[str, Any]:
        """The latest info (of the last step, else of ``reset``), with ``admissible_actions``."""
        return dict(self._info)

    def images(self) -> list[bytes]:
        """The latest screen (PNG bytes, of the last step, else of ``reset``); empty for a text
        environment."""
        return list(self._images)

    def reset_info(self) -> dict[str, Any]:
        """The info of the episode's ``reset`` (its ``goal``...)."""
        return dict(self._reset_info)

    def record(self) -> dict[str, Any]:
        """The episode, JSON-serializable: the environment, its ``goal``, ``reset_info``,
        ``steps`` (action, reward, terminated, truncated, info each, long lists left out; ``at``
        the Unix time it began and ``seconds`` it took, round trip to the process included),
        the ``return`` (the sum of the step rewards), whether it is ``over`` and how many
        ``resets`` the chain made."""
        return {
            "env": self.env, "goal": str(self._reset_info.get("goal", "")),
            "reset_info": _lean(self._reset_info), "steps": [dict(s) for s in self._steps],
            "return": sum(s["reward"] for s in self._steps), "over": self._over, "resets": self._resets,
        }

    def close(self) -> None:
        """End the environment and its process group; a call in progress is not waited for."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.busy:
            process.kill()
        process.close()


def env_tool(
    *,
    name: str,
    environment: str,
    settings: type[EnvSettings],
    description: str | None = None,
    timeout: float = 150.0,
    max_resources: int | None = None,
    aliases: Iterable[str] = (),
) -> Callable[[Callable[..., Any]], Tool]:
    """Register a tool acting on the chain's ``environment`` (its ``resource``, an :class:`EnvSession`).

    Args:
        name: the tool's name.
        environment: the :mod:`agentfly.envs` environment (registered name or ``module:attr``).
        settings: the environment's settings class (an :class:`EnvSettings`).
        description: overrides the docstring's description.
        timeout: seconds a call may take before it is abandoned: a backstop above the
            environment's own ``step_timeout`` and ``reset_timeout`` (refused otherwise).
        max_resources: environments of this kind alive at once (None: the pool's default).
        aliases: other names for the tool.
    """

    def make_session(settings: EnvSettings) -> EnvSession:
        return EnvSession(environment, settings)

    return tool(
        name=name, description=description, stateful=True, resource_factory=make_session,
        settings=settings, timeout=timeout, max_resources=max_resources, aliases=aliases,
        environment=environment,
    )


def act(session: Any, action: str) -> ToolResult:
    """Step the chain's environment and say it as a tool result (see the module docstring)."""
    try:
        return step_result(session.step(action))
    except EnvUsageError as e:
        return ToolResult(observation=str(e))
    except Exception as e:  # the environment's fault (EnvError), or a session's broken proxy
        return env_failure(e)


def step_result(result: StepResult) -> ToolResult:
    """A step as a tool result: the observation, its screen, its reward, the chain's end with
    the episode's."""
    out = ToolResult(observation=result.observation, reward=float(result.reward), images=list(result.images))
    if result.done:
        out.ends_chain, out.final_answer, out.finish_reason = True, result.observation, EPISODE_OVER
    return out


def env_failure(error: BaseException) -> ToolResult:
    """An environment's failure as a failed call that ends the chain (kind ``env_<kind>``)."""
    kind = error.kind if isinstance(error, EnvError) else "error"
    out = ToolResult.failure(f"env_{kind}", f"Error: the environment failed: {describe_error(error)}")
    out.ends_chain, out.finish_reason = True, ENV_FAILED
    return out


def environment_tools(tools: Iterable[Any]) -> list[Any]:
    """One tool per environment among ``tools`` (the first naming it), in order."""
    seen: dict[str, Any] = {}
    for t in tools:
        if getattr(t, "environment", None) is not None:
            seen.setdefault(t.resource_key, t)
    return list(seen.values())


async def start_environments(
    resources: Any, tools: Iterable[Any], row: Mapping[str, Any], seed: int | None = None
) -> None:
    """Make the chain's environments (one per environment its tools act on) and reset each
    with the chain's data row; raises :class:`EnvironmentStartError` naming the one that failed."""
    for t in environment_tools(tools):
        settings = t.settings if isinstance(t.settings, EnvSettings) else EnvSettings()
        limit = settings.start_timeout + settings.reset_timeout + START_GRACE_S
        try:
            session = await resources.get(t)
            await wait_call(THREADS.submit(session.start, dict(row), seed), limit, pool=None)
        except Exception as e:
            raise EnvironmentStartError(
                f"the {t.environment!r} environment of tool {t.name!r} did not start for this "
                f"chain: {describe_error(e)}"
            ) from e


async def environment_records(resources: Any, tools: Iterable[Any]) -> dict[str, dict[str, Any]]:
    """The episode record of each environment the chain holds, by environment (never raises)."""
    out: dict[str, dict[str, Any]] = {}
    for t in environment_tools(tools):
        session = resources.holding(t.resource_key)
        if session is None:
            continue
        try:
            out[t.resource_key] = await wait_call(THREADS.submit(session.record), RECORD_TIMEOUT_S, pool=None)
        except Exception:
            logger.warning("the %s episode of a chain could not be recorded", t.resource_key, exc_info=True)
    return out
