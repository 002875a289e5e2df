"""The rollout side of a run's plan: what :func:`agentfly.rollout.runner.build_rollout` builds.

:func:`agentfly.run.plan.plan_rollout` fills it from the config; the rollout layer reads only this
record, never the config.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class RolloutPlan:
    """The rollout side: engines, agent, tools, reward, template and the agent loop's settings.

    Attributes:
        engine: registered engine name (or ``module:attr``, a file path made absolute).
        num_engines: Ray engine actors; 0 = one engine in this process.
        engine_kwargs: every engine's constructor arguments.
        pool_kwargs: further :class:`~agentfly.rollout.engines.EnginePool` arguments.
        agent_type: registered agent type.
        tool_parser: the tool parser that reads the model's turns (None: ``agent_type``'s).
        system_prompt: replaces the agent type's system prompt.
        tools: tool names.
        tool_config: per-tool settings.
        reward: reward name (None: chains are not scored).
        reward_config: the reward's settings by reward name (``agent.init_config.reward_config``).
        template: chat template name (None: the model's own).
        resource_backend: where stateful tool resources live (``local`` or ``ray``).
        plugins: modules to import first, here, in every engine actor and in every tool/reward
            worker process (file paths absolute).
        workers: :class:`~agentfly.rollout.execution.workers.WorkerPool` keyword arguments (the worker
            processes of sync tools and rewards).
        reward_timeout: seconds a reward call may take (None: the reward's own).
        chains_in_flight: chains running at once at most (``max_concurrent_chains``, else a
            training batch's chains): the default worker pool of I/O-bound tools and rewards
            has a worker for each (up to a cap).
        loop: :class:`~agentfly.rollout.agent_loop.AgentLoop` keyword arguments (``max_model_len``
            None = the engine's).
        harness: :class:`~agentfly.rollout.harness.Harness` arguments: chains run the user's
            program (:class:`~agentfly.rollout.harness.HarnessLoop`); None: the built-in loop.
    """

    engine: str
    num_engines: int
    engine_kwargs: dict[str, Any]
    pool_kwargs: dict[str, Any]
    agent_type: str
    tool_parser: str | None
    system_prompt: str | None
    tools: list[str]
    tool_config: dict[str, Any]
    reward: str | None
    template: str | None
    resource_backend: str
    plugins: list[str]
    loop: dict[str, Any]
    workers: dict[str, Any] = field(default_factory=dict)
    reward_timeout: float | None = None
    reward_config: dict[str, Any] = field(default_factory=dict)
    chains_in_flight: int = 0
    harness: dict[str, Any] | None = None
