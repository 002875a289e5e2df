"""Builds the rollout side from its plan (:class:`~agentfly.rollout.rollout_plan.RolloutPlan`,
made by :func:`agentfly.run.plan.plan_rollout`), and runs rollouts alone (``agentfly rollout``).

Everything that can be checked before an engine starts is checked here, so a bad name or path
fails in seconds, naming it: the agent type, every tool and its settings, the reward and its
settings, the template, the search corpus, the data file and its rows.
``agent.init_config.plugins`` are imported first, here and in every engine actor.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentfly.core.plugins import load_plugins
from agentfly.rollout.agent_loop import AgentLoop
from agentfly.rollout.execution.workers import WorkerPool, default_num_workers
from agentfly.rollout.rollout_plan import RolloutPlan
from agentfly.rollout.summary import summarize, trajectory_record

logger = logging.getLogger(__name__)


def configure_tools(tool_names: list[str], tool_config: dict[str, Any] | None) -> list[Any]:
    """This run's copies of the named tools, each bound to its ``tool_config`` settings.

    See :func:`agentfly.rollout.tools.bind.bind_tools`; raises its ``ToolConfigError`` (a
    ``ValueError``) naming every unknown tool or setting.
    """
    from agentfly.rollout.tools.bind import bind_tools

    return bind_tools(list(tool_names), dict(tool_config or {}))


def prepare_tools(tools: list[Any]) -> None:
    """Run each tool's ``prepare`` (:class:`~agentfly.rollout.tools.base.Tool`): what its calls
    share is loaded here, where the run starts, not inside the first call's deadline. A load
    that fails stops the run naming the tool (its files, its package)."""
    from agentfly.core.errors import InputError

    for tool in tools:
        if tool.prepare is None:
            continue
        began = time.perf_counter()
        logger.info("preparing tool %s", tool.name)
        try:
            tool.prepare(tool.settings)
        except (OSError, ValueError, RuntimeError, ImportError) as e:
            raise InputError(f"tool {tool.name}: loading what its calls need failed: "
                             f"{type(e).__name__}: {e}") from e
        logger.info("tool %s prepared in %.1f s", tool.name, time.perf_counter() - began)


@dataclass
class RolloutSession:
    """The engine pool, the tool/reward workers and the agent loop built from one config;
    close it when done."""

    pool: Any
    loop: AgentLoop
    tokenizer: Any
    workers: WorkerPool | None = None

    def close(self) -> None:
        try:
            self.pool.shutdown()
        finally:
            if self.workers is not None:
                self.workers.close()


def worker_pool(plan: RolloutPlan, tools: list[Any]) -> WorkerPool:
    """The worker processes of the plan's sync tools (``tools``, configured) and reward, started
    in the background when any runs there (their imports overlap the engines' loading).

    With ``num_workers`` unset, the pool is sized for code that waits when such a tool or reward
    is declared ``io_bound`` (one worker per chain in flight), else for the cores
    (:func:`~agentfly.rollout.execution.workers.default_num_workers`).
    """
    from agentfly.rollout.rewards.base import is_io_bound, runs_in_process, worker_imports

    in_process = [t for t in tools if t.runs_in_process]
    reward_in_process = bool(plan.reward) and runs_in_process(plan.reward)
    settings = dict(plan.workers)
    if settings.get("num_workers") is None:
        io_bound = any(t.io_bound for t in in_process) or (
            reward_in_process and is_io_bound(plan.reward)
        )
        settings["num_workers"] = default_num_workers(io_bound, plan.chains_in_flight)
    preload = worker_imports(plan.reward) if plan.reward else []
    if in_process:
        preload.append("agentfly.rollout.tools.call")  # what a tool call runs in the worker
    workers = WorkerPool(**settings, plugins=plan.plugins, preload=preload)
    if in_process or reward_in_process:
        workers.start()
    return workers


def build_rollout(plan: RolloutPlan, *, ray_init: dict[str, Any] | None = None) -> RolloutSession:
    """The engine pool (Ray, started on demand) and the agent loop of a rollout plan."""
    from agentfly.models.loading import is_vision_model
    from agentfly.rollout.agents import get_agent
    from agentfly.rollout.engines import EnginePool
    from agentfly.rollout.rewards import get_reward
    from agentfly.rollout.rewards.reward_config import configure_reward
    from agentfly.rollout.templates import get_template
    from agentfly.rollout.tools.resources import ResourcePool
    from agentfly.rollout.vision import VisionProcessor

    load_plugins(plan.plugins)  # done when the config was composed; a no-op then
    tools = configure_tools(plan.tools, plan.tool_config)
    agent = get_agent(plan.agent_type, tools, plan.system_prompt, parser=plan.tool_parser)
    reward = None
    if plan.reward:
        get_reward(plan.reward)
        reward = configure_reward(plan.reward, plan.reward_config)  # a judge: bound to its server
    if plan.template:
        get_template(plan.template)  # an unknown name fails before any engine starts

    prepare_tools(tools)
    workers = worker_pool(plan, tools)
    backend = "ray" if plan.num_engines > 0 else "local"
    try:
        pool = EnginePool(
            plan.engine, plan.num_engines, engine_kwargs=plan.engine_kwargs, backend=backend,
            ray_init=ray_init, plugins=plan.plugins, **plan.pool_kwargs,  # actors import them too
        )
    except ImportError as e:
        workers.close()
        raise RuntimeError(
            f"engine {plan.engine!r} cannot start ({e}); use actor_rollout_ref.rollout.name=transformers"
        ) from e
    except BaseException:
        workers.close()
        raise
    tokenizer = pool.tokenizer
    loop_kwargs = dict(plan.loop)
    loop_kwargs["max_model_len"] = loop_kwargs["max_model_len"] or pool.max_model_len
    model_path = plan.engine_kwargs.get("model")
    vision = None
    if model_path and is_vision_model(model_path, plan.engine_kwargs.get("trust_remote_code", False)):
        vision = VisionProcessor.from_pretrained(model_path, tokenizer)
    loop_class: Any = AgentLoop
    if plan.harness is not None:
        from agentfly.rollout.harness import Harness, HarnessLoop

        loop_class = functools.partial(HarnessLoop, harness=Harness(**plan.harness),
                                       model_name=Path(str(model_path)).name if model_path else "agentfly")
    loop = loop_class(
        engine=pool,
        tokenizer=tokenizer,
        template=get_template(plan.template, tokenizer),
        vision=vision,
        agent=agent,
        reward=reward,
        resources=ResourcePool(backend=plan.resource_backend),
        workers=workers,
        reward_timeout=plan.reward_timeout,
        **loop_kwargs,
    )
    return RolloutSession(pool, loop, tokenizer, workers)


def run_rollout(
    plan: RolloutPlan,
    rows: list[dict[str, Any]],
    output: str | os.PathLike[str],
    *,
    prompt_key: str,
    ray_init: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Roll out every row and write one JSON line per chain.

    Writes ``output`` (JSONL, one chain per line) and ``output`` with ``.summary.json`` beside
    it; returns the summary.

    Args:
        plan: the rollout side of the run (:func:`agentfly.run.plan.plan_rollout`).
        rows: the data rows, each holding its prompt under ``prompt_key``.
        output: the JSONL file to write.
        prompt_key: the rows' prompt field.
        ray_init: ``ray.init`` arguments when the engines start Ray.
    """
    session = build_rollout(plan, ray_init=ray_init)
    start = time.perf_counter()
    try:
        trajs = session.loop.run(rows, prompt_key=prompt_key)
    finally:
        session.close()
    elapsed = time.perf_counter() - start
    out = Path(output)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as f:
        for t in trajs:
            f.write(json.dumps(trajectory_record(t, session.tokenizer), ensure_ascii=False) + "\n")
    summary = {**summarize(trajs), "seconds": round(elapsed, 3), "output": str(out)}
    out.with_suffix(".summary.json").write_text(json.dumps(summary, indent=2))
    return summary
