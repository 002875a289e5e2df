"""Whether a Ray cluster can hold N engine actors, asked before any actor is created.

Ray keeps an actor whose resources no node has *pending* without a word, and a call on it never
returns; so :class:`~agentfly.rollout.engines.pool.EnginePool` checks first. Against the alive
nodes' totals an engine must fit on one node (an actor never spans nodes); against what is free
now, the cluster-wide sum is what Ray reports (``ray.available_resources``), so a request that
passes here can still wait on fragmentation, which the pool's start deadline bounds.

The checks are pure (:func:`capacity_problem`, :func:`local_capacity_problem`);
:func:`check_capacity` reads the running cluster, and :func:`check_local_capacity` answers before
a local Ray is started for nothing (starting one takes seconds).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from agentfly.core.errors import InputError

# Ray accounts resources in steps of 1e-4; a looser tolerance keeps 3 x 0.3333 on 1 CPU.
_EPS = 1e-4
CONFIG_KEYS = (
    "actor_rollout_ref.rollout.num_engines (engines), "
    "actor_rollout_ref.rollout.tensor_model_parallel_size (GPUs per engine), "
    "trainer.n_gpus_per_node (sets the engine count when num_engines is unset)"
)


class EngineCapacityError(InputError):
    """The Ray cluster cannot hold the engines asked for; the message names both sides."""


def _fmt(x: float) -> str:
    return str(round(x)) if abs(x - round(x)) < _EPS else f"{x:g}"


def _fit(have: Mapping[str, float], need: Mapping[str, float]) -> float:
    """How many actors needing ``need`` fit in ``have`` (``inf`` when they need nothing)."""
    counts = [
        math.floor(have.get(key, 0.0) / amount + _EPS) for key, amount in need.items() if amount > 0
    ]
    return min(counts, default=math.inf)


def engines_that_fit(
    nodes: Sequence[Mapping[str, float]], num_cpus: float, num_gpus: float
) -> float:
    """Engine actors that fit on these nodes, each on one node (``inf`` if they need nothing).

    Args:
        nodes: each alive node's total resources (``{"CPU": 16.0, "GPU": 8.0, ...}``).
        num_cpus: CPUs one engine reserves.
        num_gpus: GPUs one engine reserves.
    """
    need = {"CPU": num_cpus, "GPU": num_gpus}
    return sum((_fit(node, need) for node in nodes), 0)


def _amounts(resources: Mapping[str, float]) -> str:
    return f"{_fmt(resources.get('CPU', 0.0))} CPUs, {_fmt(resources.get('GPU', 0.0))} GPUs"


def _asked(num_engines: int, num_cpus: float, num_gpus: float) -> str:
    return (
        f"{num_engines} engine actor(s) × ({_fmt(num_cpus)} CPU, {_fmt(num_gpus)} GPU) each = "
        f"{_fmt(num_engines * num_cpus)} CPUs, {_fmt(num_engines * num_gpus)} GPUs"
    )


def capacity_problem(
    num_engines: int,
    num_cpus: float,
    num_gpus: float,
    nodes: Sequence[Mapping[str, float]],
    available: Mapping[str, float],
) -> str | None:
    """Why ``num_engines`` actors of ``(num_cpus, num_gpus)`` cannot start now, or None if they can.

    Args:
        num_engines: engine actors asked for.
        num_cpus: CPUs each reserves.
        num_gpus: GPUs each reserves.
        nodes: each alive node's total resources.
        available: the cluster's free resources now (summed over nodes).

    Returns:
        A message naming the request, the cluster's total and free resources and the config keys
        to change; None when the request fits both the totals (per node) and what is free.
    """
    total = {k: sum(n.get(k, 0.0) for n in nodes) for k in ("CPU", "GPU")}
    fit_total = engines_that_fit(nodes, num_cpus, num_gpus)
    fit_free = _fit(available, {"CPU": num_cpus, "GPU": num_gpus})
    if num_engines <= min(fit_total, fit_free):
        return None
    asked = _asked(num_engines, num_cpus, num_gpus)
    has = (
        f"the Ray cluster has {_amounts(total)} in total on {len(nodes)} node(s), "
        f"{_amounts(available)} free now"
    )
    if num_engines > fit_total:
        fits = f"at most {_fmt(fit_total)} such engine(s) fit on its nodes"
        if num_gpus > 0 and not total["GPU"]:
            fits += " (the cluster has no GPU)"
        return (
            f"cannot start {asked}: {has}; {fits}. Ask for less with {CONFIG_KEYS}, "
            "or join a larger cluster (RAY_ADDRESS)."
        )
    return (
        f"cannot start {asked}: {has}; other actors or jobs hold the rest, and {_fmt(fit_free)} "
        f"such engine(s) fit in what is free. Wait for them to finish, stop them, or ask for "
        f"less with {CONFIG_KEYS}."
    )


def local_capacity_problem(
    num_engines: int,
    num_cpus: float,
    num_gpus: float,
    ray_cpus: float,
    ray_gpus: float | None,
) -> str | None:
    """:func:`capacity_problem` for the one-node Ray this process is about to start.

    Args:
        num_engines: engine actors asked for.
        num_cpus: CPUs each reserves.
        num_gpus: GPUs each reserves.
        ray_cpus: the CPUs it will have at most (``ray.init(num_cpus=...)``, else the machine's
            cores: Ray never counts more, fewer under a cgroup quota).
        ray_gpus: the GPUs it will have when given to ``ray.init``; None leaves GPUs to the
            check on the started cluster (Ray finds them itself).
    """
    need = {"CPU": num_cpus, "GPU": num_gpus if ray_gpus is not None else 0.0}
    fit = _fit({"CPU": ray_cpus, "GPU": ray_gpus or 0.0}, need)
    if num_engines <= fit:
        return None
    has = f"{_fmt(ray_cpus)} CPUs" + (f", {_fmt(ray_gpus)} GPUs" if ray_gpus is not None else "")
    return (
        f"cannot start {_asked(num_engines, num_cpus, num_gpus)}: the Ray instance this process "
        f"starts has {has} (ray_init, else this machine's cores); at most {_fmt(fit)} such "
        f"engine(s) fit. Ask for less with {CONFIG_KEYS}, or join a larger cluster (RAY_ADDRESS)."
    )


def check_local_capacity(
    num_engines: int, num_cpus: float, num_gpus: float, ray_init: Mapping[str, Any] | None = None
) -> None:
    """Raise :class:`EngineCapacityError` before starting a local Ray that cannot hold the engines.

    Args:
        num_engines: engine actors about to be created.
        num_cpus: CPUs each reserves.
        num_gpus: GPUs each reserves.
        ray_init: the ``ray.init`` arguments the pool will start Ray with (``num_cpus``,
            ``num_gpus``).
    """
    init = dict(ray_init or {})
    cpus = init.get("num_cpus") or os.cpu_count() or 1
    problem = local_capacity_problem(num_engines, num_cpus, num_gpus, cpus, init.get("num_gpus"))
    if problem is not None:
        raise EngineCapacityError(problem)


def cluster_nodes() -> list[dict[str, float]]:
    """The alive nodes' total resources in the Ray cluster this process is connected to."""
    import ray

    return [dict(node["Resources"]) for node in ray.nodes() if node.get("Alive")]


def check_capacity(
    num_engines: int, num_cpus: float, num_gpus: float, *, wait_s: float = 10.0
) -> None:
    """Raise :class:`EngineCapacityError` unless the connected cluster can hold the engines.

    A request beyond the cluster's totals fails at once; one that fits the totals but not what
    is free now is asked again for up to ``wait_s`` seconds (resources of actors just stopped
    come back within a moment), then fails.

    Args:
        num_engines: engine actors about to be created.
        num_cpus: CPUs each reserves.
        num_gpus: GPUs each reserves.
        wait_s: how long to wait for busy resources to come free.
    """
    import ray

    deadline = time.monotonic() + wait_s
    while True:
        nodes = cluster_nodes()
        available: dict[str, Any] = dict(ray.available_resources())
        problem = capacity_problem(num_engines, num_cpus, num_gpus, nodes, available)
        if problem is None:
            return
        beyond_totals = num_engines > engines_that_fit(nodes, num_cpus, num_gpus)
        if beyond_totals or time.monotonic() >= deadline:
            if not beyond_totals:
                problem += f" (waited {_fmt(wait_s)} s: EnginePool resource_wait_s)"
            raise EngineCapacityError(problem)
        time.sleep(min(0.25, max(0.0, deadline - time.monotonic())))
