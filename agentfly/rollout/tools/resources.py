"""Per-chain resources for stateful tools (a Python session, ...), and the pool that caps them.

A chain takes its resources through a ``ChainResources`` and gives them all back when it ends,
also when it fails or is cancelled::

    pool = ResourcePool(backend="local", max_per_tool=8)
    async with pool.chain(chain_id) as resources:
        result = await run_tool_call(name, arguments, resource=resources)

Each tool has a cap on live resources (``Tool.max_resources``, else the pool's
``max_per_tool``); a chain that needs one more waits for another chain to end. The tools of one
environment (``Tool.environment``) share their resource, its cap and its count
(``Tool.resource_key``).

Backends: ``"local"`` makes resources in this process (the factory runs in a worker thread).
``"ray"`` puts each resource in its own Ray actor and hands the tool a proxy whose method calls
are blocking remote calls; tools call it from their worker thread. Ray is imported only then.
Every wait on a resource actor has a deadline: ``ready_timeout_s`` for the actor to come up (its
factory included), ``call_timeout_s`` for one method call; past it the wait ends with a
``TimeoutError`` naming the tool, the method and the setting.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import weakref
from collections import Counter
from collections.abc import AsyncIterator, Callable, Hashable, Mapping
from typing import Any, Literal

from agentfly.rollout.execution.daemon_threads import THREADS
from agentfly.rollout.execution.workers import WorkerTimeout, wait_call
from agentfly.rollout.tools.base import Tool, get_tool

logger = logging.getLogger(__name__)

Backend = Literal["local", "ray"]

READY_TIMEOUT_S = 120.0  # a resource actor's start, its factory included
CALL_TIMEOUT_S = 600.0  # one method call on a resource actor
CLOSE_TIMEOUT_S = 30.0  # a resource actor's close() before the actor is killed


class _ResourceActor:
    """Holds one resource inside a Ray actor (wrapped with ``ray.remote`` on first use)."""

    def __init__(self, factory: Callable[[], Any]) -> None:
        self.resource = factory()

    def ready(self) -> bool:
        return True

    def call(self, method: str, args: tuple, kwargs: dict) -> Any:
        return getattr(self.resource, method)(*args, **kwargs)

    def close(self) -> None:
        close = getattr(self.resource, "close", None)
        if close is not None:
            close()


@functools.cache
def _remote_actor_class() -> Any:
    import ray

    return ray.remote(_ResourceActor)


class RayResource:
    """A proxy for a resource living in a Ray actor; ``proxy.run(x)`` blocks on the remote call.

    Args:
        actor: the Ray actor holding the resource.
        tool_name: the tool the resource belongs to (for messages).
        call_timeout_s: how long one method call may take before ``TimeoutError``.
    """

    def __init__(self, actor: Any, tool_name: str = "?", call_timeout_s: float = CALL_TIMEOUT_S) -> None:
        self._actor = actor
        self._tool = tool_name
        self._call_timeout_s = call_timeout_s
        self._killed = False

    def __getattr__(self, method: str) -> Callable[..., Any]:
        if method.startswith("_"):
            raise AttributeError(method)

        def call(*args: Any, **kwargs: Any) -> Any:
            import ray
            from ray.exceptions import GetTimeoutError

            ref = self._actor.call.remote(method, args, kwargs)
            try:
                return ray.get(ref, timeout=self._call_timeout_s)
            except GetTimeoutError:
                self._killed = True  # it runs one call at a time: stuck, it is of no further use
                ray.kill(self._actor)
                raise TimeoutError(
                    f"a {self._tool} resource's {method}() did not return within "
                    f"{self._call_timeout_s:g} s (ResourcePool call_timeout_s); its actor was killed"
                ) from None

        return call

    def close(self) -> None:
        import ray

        if self._killed:
            return
        try:
            ray.get(self._actor.close.remote(), timeout=CLOSE_TIMEOUT_S)
        finally:
            ray.kill(self._actor)


class ResourcePool:
    """Makes, caps and destroys the per-chain resources of stateful tools.

    Args:
        backend: ``"local"`` (in this process) or ``"ray"`` (one Ray actor per resource).
        max_per_tool: cap on live resources per tool, unless the tool sets ``max_resources``.
        factories: per-tool factories overriding ``Tool.resource_factory`` (e.g. a
            ``functools.partial(PythonSession, timeout=5)``), keyed by tool name.
        ray_actor_options: options for each resource actor (default ``{"num_cpus": 0}``:
            resources mostly wait, and a CPU each would cap them at the cluster's CPU count).
        ready_timeout_s: how long a resource actor may take to come up (Ray placing it, the
            factory running); past it the actor is killed and ``TimeoutError`` raised.
        call_timeout_s: how long one method call on a resource actor may take.
    """

    def __init__(
        self,
        backend: Backend = "local",
        *,
        max_per_tool: int = 16,
        factories: Mapping[str, Callable[[], Any]] | None = None,
        ray_actor_options: Mapping[str, Any] | None = None,
        ready_timeout_s: float = READY_TIMEOUT_S,
        call_timeout_s: float = CALL_TIMEOUT_S,
    ) -> None:
        if backend not in ("local", "ray"):
            raise ValueError(f"unknown resource backend {backend!r} (known: local, ray)")
        if max_per_tool < 1:
            raise ValueError(f"max_per_tool must be at least 1, got {max_per_tool}")
        self.backend = backend
        self.max_per_tool = max_per_tool
        self._factories = {get_tool(k).name: v for k, v in (factories or {}).items()}
        self._actor_options = dict(ray_actor_options or {"num_cpus": 0})
        self.ready_timeout_s = ready_timeout_s
        self.call_timeout_s = call_timeout_s
        # Per event loop: a semaphore belongs to the loop it first waited in, and callers may
        # run each rollout step in a fresh ``asyncio.run``.
        self._semaphores: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[str, asyncio.Semaphore]
        ] = weakref.WeakKeyDictionary()
        self._live: Counter[str] = Counter()

    def live(self, tool_name: str) -> int:
        """How many resources of the tool (of its environment) exist now."""
        return self._live[get_tool(tool_name).resource_key]

    def _semaphore(self, tool: Tool) -> asyncio.Semaphore:
        semaphores = self._semaphores.setdefault(asyncio.get_running_loop(), {})
        key = tool.resource_key
        if key not in semaphores:
            semaphores[key] = asyncio.Semaphore(tool.max_resources or self.max_per_tool)
        return semaphores[key]

    def _create(self, tool: Tool) -> Any:
        factory = self._factories.get(tool.name)
        if factory is None and tool.resource_factory is None:
            raise ValueError(f"tool {tool.name!r} is not stateful: it has no resource factory")
        factory = factory or tool.new_resource  # the tool's factory, given its settings
        if self.backend == "local":
            return factory()
        import ray
        from ray.exceptions import GetTimeoutError

        actor = _remote_actor_class().options(**self._actor_options).remote(factory)
        try:
            ray.get(actor.ready.remote(), timeout=self.ready_timeout_s)  # a factory's error too
        except GetTimeoutError:
            ray.kill(actor)
            raise TimeoutError(
                f"the Ray actor for a {tool.name} resource did not come up within "
                f"{self.ready_timeout_s:g} s (ResourcePool ready_timeout_s): Ray could not place "
                "it, or the tool's resource factory did not return"
            ) from None
        except BaseException:
            ray.kill(actor)
            raise
        return RayResource(actor, tool.name, self.call_timeout_s)

    @staticmethod
    def _destroy(tool_name: str, resource: Any) -> None:
        close = getattr(resource, "close", None)
        if close is None:
            return
        try:
            close()
        except Exception:
            logger.warning("releasing a %s resource failed", tool_name, exc_info=True)

    @contextlib.asynccontextmanager
    async def acquire(self, tool_name: str | Tool, chain_id: Hashable) -> AsyncIterator[Any]:
        """Make a resource for ``tool_name`` (waiting under the cap) and destroy it on exit.

        Args:
            tool_name: the stateful tool (or an alias), or the ``Tool`` itself (a configured
                copy makes its resources with its own settings).
            chain_id: the chain that holds it (for logs).
        """
        tool = tool_name if isinstance(tool_name, Tool) else get_tool(tool_name)
        if self.backend == "ray":
            from agentfly.core.shutdown import on_ray_started
            from agentfly.rollout.engines.host import ensure_ray

            if ensure_ray():  # here, not in the worker thread that makes the actor
                on_ray_started()  # SIGTERM handler back, Ray's processes watched
        async with self._semaphore(tool):
            # the package's daemon threads, not asyncio's executor (asyncio.run would wait on a
            # factory that never returns); the tool's timeout bounds the wait (a Ray actor has
            # its own ready_timeout_s, which ends the wait first)
            limit = tool.timeout
            if self.backend == "ray":
                limit = max(limit, self.ready_timeout_s + 10.0)
            made = THREADS.submit(self._create, tool)
            try:
                resource = await asyncio.wait_for(asyncio.wrap_future(made), limit)
            except (TimeoutError, asyncio.TimeoutError) as e:  # distinct before Python 3.11
                if made.done():  # the factory's own TimeoutError (ready_timeout_s)
                    raise
                raise TimeoutError(
                    f"making a {tool.name} resource took more than {limit:g} s "
                    f"(agent.init_config.tool_config.{tool.name}.timeout); abandoned"
                ) from e
            self._live[tool.resource_key] += 1
            logger.debug("chain %s acquired a %s resource", chain_id, tool.resource_key)
            try:
                yield resource
            finally:
                self._live[tool.resource_key] -= 1
                # Shielded: a cancelled chain still gets its resource destroyed.
                done = THREADS.submit(self._destroy, tool.name, resource)
                try:
                    await asyncio.shield(wait_call(done, tool.timeout, pool=None))
                except WorkerTimeout:
                    logger.warning(
                        "releasing a %s resource took more than %g s; abandoned", tool.name, tool.timeout
                    )
                logger.debug("chain %s released its %s resource", chain_id, tool.name)

    def chain(self, chain_id: Hashable) -> ChainResources:
        """The resources of one chain, made on first use and released together."""
        return ChainResources(self, chain_id)


class ChainResources:
    """One chain's resources, at most one per stateful tool (per environment, for the tools
    that share one); an async context manager.

    Args:
        pool: the pool that makes and caps them.
        chain_id: the chain's id (for logs).
    """

    def __init__(self, pool: ResourcePool, chain_id: Hashable) -> None:
        self.pool = pool
        self.chain_id = chain_id
        self._held: dict[str, Any] = {}
        self._stack = contextlib.AsyncExitStack()
        self._lock = asyncio.Lock()

    async def get(self, tool_name: str | Tool) -> Any:
        """The chain's resource for ``tool_name`` (a name, or the ``Tool``), acquired on the first call."""
        tool = tool_name if isinstance(tool_name, Tool) else get_tool(tool_name)
        key = tool.resource_key
        async with self._lock:
            if key not in self._held:
                self._held[key] = await self._stack.enter_async_context(
                    self.pool.acquire(tool, self.chain_id)
                )
            return self._held[key]

    @property
    def held(self) -> list[str]:
        """What this chain holds resources of: tool names, environment names (``resource_key``)."""
        return list(self._held)

    def holding(self, key: str) -> Any:
        """The resource held under ``key`` (a ``resource_key``), or None."""
        return self._held.get(key)

    async def release_all(self) -> None:
        """Destroy every resource of the chain; safe to call twice."""
        async with self._lock:
            stack, self._stack = self._stack, contextlib.AsyncExitStack()
            self._held.clear()
            await stack.aclose()

    async def __aenter__(self) -> ChainResources:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.release_all()
