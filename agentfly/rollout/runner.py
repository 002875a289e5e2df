"""Builds the rollout side from a resolved config, and runs rollouts alone (``agentfly rollout``).

Everything that can be checked before an engine starts is checked here, so a bad name or path
fails in seconds, naming it: the agent type, every tool and its settings, the reward, the
template, the search corpus, the data file and its rows. ``agent.init_config.plugins`` are
imported first, here and in every engine actor.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentfly.plugins import is_object_spec, load_plugins, portable
from agentfly.rollout.agent_loop import AgentLoop
from agentfly.rollout.summary import summarize, trajectory_record

logger = logging.getLogger(__name__)


def _get(cfg: Any, dotted: str, default: Any = None) -> Any:
    node = cfg
    for part in dotted.split("."):
        if node is None:
            return default
        node = node.get(part) if hasattr(node, "get") else getattr(node, part, None)
    return default if node is None else node


def _plain(node: Any) -> Any:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node


def configure_tools(tool_names: list[str], tool_config: dict[str, Any] | None) -> list[Any]:
    """This run's copies of the named tools, each bound to its ``tool_config`` settings.

    See :func:`agentfly.rollout.tools.settings.bind_tools`; raises its ``ToolConfigError`` (a
    ``ValueError``) naming every unknown tool or setting.
    """
    from agentfly.rollout.tools.settings import bind_tools

    return bind_tools(list(_plain(tool_names) or []), _plain(tool_config) or {})


@dataclass
class RolloutSession:
    """The engine pool and the agent loop built from one config; close it when done."""

    pool: Any
    loop: AgentLoop
    tokenizer: Any

    def close(self) -> None:
        self.pool.shutdown()


def engine_settings(cfg: Any) -> tuple[str, int, dict[str, Any], dict[str, Any]]:
    """(engine name, number of engines, engine kwargs, pool kwargs) from the config."""
    import torch

    rollout = _get(cfg, "actor_rollout_ref.rollout")
    model = _get(cfg, "agent.init_config.model_name_or_path")
    if not model:
        raise ValueError("agent.init_config.model_name_or_path (or actor_rollout_ref.model.path) is not set")
    # trainer.device=cpu keeps the engines on the CPU too, GPUs or not
    cuda = torch.cuda.is_available() and str(_get(cfg, "trainer.device", "auto")) != "cpu"
    dtype = _get(rollout, "dtype", "float32") if cuda else "float32"
    kwargs: dict[str, Any] = {
        "model": str(model),
        "dtype": dtype,
        "seed": int(_get(cfg, "trainer.seed", 0)),
    }
    name = _get(rollout, "name", "hf")
    if not cuda and name == "hf":
        kwargs["device"] = "cpu"
    max_len = _get(cfg, "agent.init_config.max_model_len")
    if max_len:
        kwargs["max_model_len"] = int(max_len)
    tp = int(_get(rollout, "tensor_model_parallel_size", 1))
    if name == "vllm":
        kwargs["gpu_memory_utilization"] = float(_get(rollout, "gpu_memory_utilization", 0.5))
        kwargs["tensor_parallel_size"] = tp
    num = _get(rollout, "num_engines")
    if num is None:
        gpus = int(_get(cfg, "trainer.n_gpus_per_node", 1)) * int(_get(cfg, "trainer.nnodes", 1))
        num = max(1, gpus // tp) if cuda else 1
    pool_kwargs = {"num_gpus_per_engine": tp if cuda else 0}
    return name, int(num), kwargs, pool_kwargs


def build_rollout(cfg: Any, *, ray_init: dict[str, Any] | None = None) -> RolloutSession:
    """The engine pool (Ray, started on demand) and the agent loop for ``cfg``."""
    from agentfly.rollout.agents import get_agent
    from agentfly.rollout.engines import EnginePool
    from agentfly.rollout.resources import ResourcePool
    from agentfly.rollout.rewards import get_reward
    from agentfly.rollout.templates import get_template

    init = _get(cfg, "agent.init_config")
    run = _get(cfg, "agent.run_config")
    plugins = [portable(p) for p in _plain(_get(init, "plugins", [])) or []]
    load_plugins(plugins)  # done when the config was composed; a no-op then
    tools = configure_tools(list(_get(init, "tools", [])), _get(init, "tool_config"))
    agent = get_agent(_get(init, "agent_type", "hf"), tools, _get(init, "system_prompt"))
    reward = _get(init, "reward_name")
    if reward:
        get_reward(reward)
    template_name = _get(init, "template")
    if template_name:
        get_template(template_name)  # an unknown name fails before any engine starts

    name, num, engine_kwargs, pool_kwargs = engine_settings(cfg)
    backend = "ray" if num > 0 else "local"
    try:
        pool = EnginePool(
            portable(name) if is_object_spec(name) else name,
            num,
            engine_kwargs=engine_kwargs,
            backend=backend,
            ray_init=ray_init,
            plugins=plugins,  # engine actors import them too
            **pool_kwargs,
        )
    except ImportError as e:
        raise RuntimeError(
            f"engine {name!r} cannot start ({e}); use actor_rollout_ref.rollout.name=hf"
        ) from e
    tokenizer = pool.tokenizer
    template = get_template(template_name, tokenizer)
    gen = _get(run, "generation_config")
    resources = ResourcePool(backend=_get(run, "context_config.resource_backend", "local"))
    loop = AgentLoop(
        engine=pool,
        tokenizer=tokenizer,
        template=template,
        agent=agent,
        reward=reward,
        resources=resources,
        max_turns=int(_get(run, "max_turns", 3)),
        num_chains=int(_get(run, "num_chains", 1)),
        max_concurrent_chains=_get(run, "max_concurrent_chains"),
        max_tokens=int(_get(gen, "max_tokens", 256)),
        max_model_len=int(_get(init, "max_model_len") or pool.max_model_len),
        temperature=float(_get(gen, "temperature", 1.0)),
        top_p=float(_get(gen, "top_p", 1.0)),
        train_on_last_turn=bool(_get(cfg, "agent.train_on_last_turn", False)),
        seed=int(_get(cfg, "trainer.seed", 0)),
    )
    return RolloutSession(pool, loop, tokenizer)


def run_rollout(
    cfg: Any,
    output: str | os.PathLike[str],
    *,
    split: str = "train",
    limit: int | None = None,
    ray_init: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Roll out every row of the data file(s) and write one JSON line per chain.

    Writes ``output`` (JSONL, one chain per line) and ``output`` with ``.summary.json`` beside
    it; returns the summary.
    """
    from agentfly.rollout.data import load_rows

    files = _get(cfg, f"data.{split}_files") or []
    if isinstance(files, str):
        files = [files]
    if not files:
        raise ValueError(f"data.{split}_files is not set: nothing to roll out")
    prompt_key = _get(cfg, "data.prompt_key")
    rows = [row for f in files for row in load_rows(f, prompt_key)]
    if limit is not None:
        rows = rows[:limit]
    session = build_rollout(cfg, ray_init=ray_init)
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
