"""A pool of generation engines: Ray actors (or one in-process engine) behind ``await generate``.

Created once and reused every training step. Concurrent requests are merged into batches
(:mod:`agentfly.rollout.engines.batching`); a request with a ``seed`` samples from its own
generator, so its output does not depend on what else shares the batch.

``update_weights`` reaches every engine; an engine applies it after the batch it is running
(Ray runs an actor's calls one at a time; the in-process engine has a lock).

Ray: started on demand (``ray.init(num_cpus=..., _temp_dir=...)``) unless already initialised or
``RAY_ADDRESS`` names a cluster to join. The engines are created only if the cluster can hold
them, and every wait on them has a deadline (:mod:`agentfly.rollout.engines.actors`).
``num_engines=0`` or ``backend="local"`` keeps one engine in this process; under
:func:`~agentfly.rollout.engines.caller_thread.run_sync` (how the agent loop runs a rollout) it
generates on the calling thread, otherwise on a daemon thread.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from agentfly.core.weights import LoraAdapter
from agentfly.rollout.engines.actors import Deadlines, RayEngines
from agentfly.rollout.engines.base import GenerationOutput, SamplingParams
from agentfly.rollout.engines.batching import RequestBatcher
from agentfly.rollout.engines.caller_thread import InProcessCalls
from agentfly.rollout.engines.capacity import check_local_capacity
from agentfly.rollout.engines.host import EngineHost, ensure_ray

if TYPE_CHECKING:
    from agentfly.rollout.engines.base import Weights

__all__ = ["EnginePool"]


class EnginePool:
    """N engines behind one asynchronous ``generate``.

    With Ray, the pool first checks that the cluster can hold the engines (each on one node:
    ``num_engines`` × (``num_cpus_per_engine``, ``num_gpus_per_engine``) against the alive nodes'
    totals and what is free) and raises
    :class:`~agentfly.rollout.engines.capacity.EngineCapacityError` naming both sides rather than
    leave actors pending; then it waits for every engine to come up. Every later wait on Ray has
    a deadline: an engine whose call passes it is stopped, one whose process dies is dropped, the
    request it ran fails with :class:`~agentfly.rollout.engines.errors.EngineLostError` (a
    ``TimeoutError`` for a deadline) naming the engine and why, and the others serve on; with
    none left every request fails at once (see :mod:`agentfly.rollout.engines.actors`). The
    in-process engine runs in this process, with no deadline.

    Args:
        engine: registered engine name (``"transformers"``, ``"vllm"``...).
        num_engines: engines to start; 0 means one in-process engine (``backend="local"``).
        engine_kwargs: constructor arguments of every engine (model path, dtype, max_model_len,
            device, seed...). With Ray, engine ``i`` gets ``seed + i`` so samples differ.
        backend: ``"ray"`` (actors) or ``"local"`` (in-process, for debugging).
        num_cpus_per_engine: Ray CPUs per actor (its torch thread count on GPU engines). A CPU
            engine computes on at least one core: with the default 1, as many CPU engines start
            as the cluster has CPUs (a Ray started here has every core of the machine).
        num_threads: torch intra-op threads of each engine actor. None: on CPU-only engines,
            the machine's cores split between the engines (rollout and update alternate, so an
            engine may use every core the trainer is not using, which is all of them while it
            generates); on GPU engines, ``num_cpus_per_engine``.
        num_gpus_per_engine: Ray GPUs per actor.
        max_batch_size: rows (prompts × n) one merged batch may hold.
        ray_init: ``ray.init`` keyword arguments when the pool starts Ray (``num_cpus``,
            ``temp_dir``, ...), see :func:`ensure_ray`.
        plugins: modules every engine host imports before it builds its engine (dotted names
            importable on every node, or absolute ``.py`` paths every node can read).
        resource_wait_s: how long to wait for resources that exist but other actors hold (a
            request beyond the cluster's totals fails at once).
        engine_start_timeout_s: how long the engines may take to come up (model download and
            loading included; vLLM takes 30-80 s on a CPU).
        generate_timeout_s: how long one engine call (a merged batch) may generate.
        weights_timeout_s: how long an engine may take to load new weights.
        call_timeout_s: how long ``stats``, ``tokenizer``, ``sleep`` and ``wake_up`` may take.
        shutdown_timeout_s: how long the engines may take to free their resources at shutdown
            before their actors are killed; and how long stopping a Ray this pool started may
            take before its processes are killed.
        weight_bucket_mb: the most MiB of weights one update request to the engine actors
            carries (``update_weights``; verl's ``update_weights_bucket_megabytes``).
    """

    def __init__(
        self,
        engine: str = "transformers",
        num_engines: int = 1,
        *,
        engine_kwargs: dict[str, Any] | None = None,
        backend: Literal["ray", "local"] = "ray",
        num_cpus_per_engine: float = 1,
        num_gpus_per_engine: float = 0,
        max_batch_size: int = 256,
        ray_init: dict[str, Any] | None = None,
        num_threads: int | None = None,
        plugins: Sequence[str] = (),
        resource_wait_s: float = 10.0,
        engine_start_timeout_s: float = 600.0,
        generate_timeout_s: float = 600.0,
        weights_timeout_s: float = 600.0,
        call_timeout_s: float = 120.0,
        shutdown_timeout_s: float = 30.0,
        weight_bucket_mb: int = 2048,
    ) -> None:
        if num_engines < 0:
            raise ValueError(f"num_engines must be >= 0, got {num_engines}")
        if weight_bucket_mb <= 0:
            raise ValueError(f"weight_bucket_mb must be > 0, got {weight_bucket_mb}")
        self.weight_bucket_bytes = int(weight_bucket_mb) << 20  # MiB, as verl counts them
        deadlines = Deadlines(
            resource_wait_s=resource_wait_s,
            engine_start_timeout_s=engine_start_timeout_s,
            generate_timeout_s=generate_timeout_s,
            weights_timeout_s=weights_timeout_s,
            call_timeout_s=call_timeout_s,
            shutdown_timeout_s=shutdown_timeout_s,
        )
        self.backend = "local" if num_engines == 0 else backend
        kwargs = dict(engine_kwargs or {})
        self._started_ray = False
        self._shutdown_timeout_s = shutdown_timeout_s
        self._ray: RayEngines | None = None
        if self.backend == "local":
            self._hosts: list[Any] = [EngineHost(engine, kwargs, plugins=plugins)]
        elif self.backend == "ray":
            if num_threads is None and not num_gpus_per_engine:
                num_threads = (os.cpu_count() or 1) // max(1, num_engines)
            threads = max(1, int(num_threads or num_cpus_per_engine))
            if not os.environ.get("RAY_ADDRESS") and not _ray_is_initialized():
                # a Ray started here cannot hold them: say so before spending seconds on it
                cpus, gpus = num_cpus_per_engine, num_gpus_per_engine
                check_local_capacity(num_engines, cpus, gpus, ray_init)
            self._started_ray = ensure_ray(**(ray_init or {}))
            try:
                if self._started_ray:
                    from agentfly.core.shutdown import on_ray_started

                    on_ray_started()  # SIGTERM handler back, Ray's processes watched
                self._ray = RayEngines(
                    engine,
                    num_engines,
                    kwargs,
                    num_cpus=num_cpus_per_engine,
                    num_gpus=num_gpus_per_engine,
                    num_threads=threads,
                    deadlines=deadlines,
                    plugins=plugins,
                )
            except BaseException:
                self._stop_ray()
                raise
            self._hosts = self._ray.hosts
        else:
            raise ValueError(f"backend must be 'ray' or 'local', got {backend!r}")
        self._tokenizer: Any = None
        #: where the in-process engine's calls run (None with Ray), see run_sync
        self.in_process_calls = InProcessCalls() if self._ray is None else None
        ray_engines = self._ray
        self._batcher = RequestBatcher(
            self._generate_on,
            self._live,
            max_batch_size,
            lose=ray_engines.lose if ray_engines is not None else None,
            none_left=ray_engines.none_left if ray_engines is not None else None,
        )

    @property
    def num_engines(self) -> int:
        """Engines the pool started, those lost included (see :attr:`lost_engines`)."""
        return len(self._hosts)

    @property
    def lost_engines(self) -> dict[int, str]:
        """Engines that left the pool (died, or passed a deadline), each with the reason."""
        return dict(self._ray.lost) if self._ray is not None else {}

    def _live(self) -> list[int]:
        return self._ray.live() if self._ray is not None else list(range(len(self._hosts)))

    async def generate(
        self,
        prompts: list[list[int]],
        sampling: SamplingParams,
        *,
        engine: int | None = None,
    ) -> list[list[GenerationOutput]]:
        """Sample ``sampling.n`` continuations of every prompt on some engine.

        Args:
            prompts: token ids per prompt.
            sampling: sampling parameters.
            engine: run on this engine index, bypassing the queue (for tests and debugging).

        Raises:
            EngineLostError: the engine that ran the request died or passed
                ``generate_timeout_s`` (an ``EngineTimeoutError``), or no engine is left.
        """
        if not isinstance(sampling, SamplingParams):  # a worker could not batch it: fail here
            raise TypeError(
                f"sampling must be one SamplingParams for all prompts, got {type(sampling).__name__}"
            )
        if not prompts:
            return []
        if engine is not None:
            return await self._call(engine, "generate", prompts, sampling)
        if self._ray is not None and not self._ray.live():
            raise self._ray.none_left()
        return await self._batcher.submit(prompts, sampling)

    def update_weights(self, weights: Weights | LoraAdapter, version: int | None = None) -> None:
        """Load new weights into every engine; returns once all have them.

        ``version`` names them (the trainer's policy version); every sample generated with them
        carries it (:attr:`GenerationOutput.weights_version`). None: each engine counts loads.

        A state dict (or a LoRA adapter, for engines that serve one) travels in buckets of at
        most ``weight_bucket_mb`` MiB (:func:`~agentfly.rollout.engines.weights.weight_buckets`):
        each is copied to the CPU, put into the Ray object store once, shared by all actors and
        released before the next, so the sender holds one bucket at a time; every engine loads
        the whole once its last bucket is in (:meth:`EngineHost.load_weights_bucket`). A path is
        read by each actor (it must be visible to every node). The in-process engine takes the
        weights in place: nothing is sent. An engine that dies or passes ``weights_timeout_s``
        leaves the pool.
        """
        if self._ray is None:
            self._hosts[0].load_weights(weights, version)
            return
        if isinstance(weights, str | os.PathLike):
            self._ray.call_all("load_weights", weights, version)
            return
        import ray

        from agentfly.rollout.engines.weights import read_weights, weight_buckets

        adapter = weights if isinstance(weights, LoraAdapter) else None
        state = adapter.weights if adapter is not None else read_weights(weights)  # type: ignore[arg-type]
        buckets = weight_buckets(state, self.weight_bucket_bytes)
        for i, bucket in enumerate(buckets):
            cpu = {k: v.detach().to("cpu") for k, v in bucket.items()}
            payload: Any = cpu if adapter is None else LoraAdapter(config=adapter.config, weights=cpu)
            ref = ray.put(payload)
            del cpu, payload
            self._ray.call_all("load_weights_bucket", ref, version, i == len(buckets) - 1)
            del ref  # the object store frees the bucket before the next is put

    def sleep(self) -> None:
        self._broadcast("sleep")

    def wake_up(self) -> None:
        self._broadcast("wake_up")

    def shares_device(self, device: Any) -> bool:
        """Whether an engine of the pool computes in this process on ``device``: the in-process
        engine on the trainer's device, where memory it keeps is memory the trainer lacks (a Ray
        engine has a process of its own)."""
        if self._ray is not None:
            return False
        engine_device = getattr(self._hosts[0].engine, "device", None)
        return engine_device is not None and _same_device(engine_device, device)

    def free_prefix_cache(self) -> None:
        """Every engine drops its prefix cache (:meth:`Engine.free_prefix_cache`)."""
        self._broadcast("free_prefix_cache")

    def stats(self) -> list[dict[str, Any]]:
        """Per engine in the pool: process id, requests served, weights version, max_model_len,
        and the engine's own figures (:meth:`Engine.stats`: the prefix cache's size...)."""
        if self._ray is None:
            return [self._hosts[0].stats()]
        return self._ray.call_all("stats")

    @property
    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            if self._ray is None:
                self._tokenizer = self._hosts[0].get_tokenizer()
            else:
                got: list[Any] = []
                while not got:  # the first live engine answers; call_all raises if none is left
                    got = self._ray.call_all("get_tokenizer", engines=self._ray.live()[:1])
                self._tokenizer = got[0]
        return self._tokenizer

    @property
    def max_model_len(self) -> int:
        return self.stats()[0]["max_model_len"]

    def shutdown(self) -> None:
        """Stop the workers and the engines; stop Ray if this pool started it."""
        self._batcher.cancel()
        try:
            if self._ray is not None:
                ray_engines, self._ray = self._ray, None
                ray_engines.close()  # vLLM frees shared memory; a dead or hung actor is killed anyway
            else:
                for h in self._hosts:
                    h.close()
        finally:
            self._hosts = []
            self._stop_ray()  # also when closing an engine failed

    def _stop_ray(self) -> None:
        """Stop the Ray this pool started, within ``shutdown_timeout_s`` (then its processes are
        killed, see :func:`agentfly.core.shutdown.stop_ray`)."""
        if self._started_ray:
            from agentfly.core.shutdown import stop_ray

            self._started_ray = False
            stop_ray(self._shutdown_timeout_s)

    def __enter__(self) -> EnginePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # -- dispatch ---------------------------------------------------------------------------

    async def _call(self, index: int, method: str, *args: Any) -> Any:
        if self._ray is not None:
            return await self._ray.call(index, method, *args)
        assert self.in_process_calls is not None
        return await self.in_process_calls.call(getattr(self._hosts[index], method), *args)

    async def _generate_on(
        self, index: int, prompts: list[list[int]], sampling: SamplingParams | list[SamplingParams]
    ) -> list[list[GenerationOutput]]:
        return await self._call(index, "generate", prompts, sampling)

    def _broadcast(self, method: str) -> None:
        if self._ray is None:
            getattr(self._hosts[0], method)()
            return
        self._ray.call_all(method)


def _same_device(a: Any, b: Any) -> bool:
    """Whether two torch devices (or their names) are one: ``cuda`` is the current CUDA device,
    and the CPU is one device whatever its index."""
    import torch

    def resolved(d: Any) -> tuple[str, int | None]:
        d = torch.device(d)
        if d.type == "cpu":
            return d.type, None
        if d.type == "cuda" and d.index is None:
            return d.type, torch.cuda.current_device()
        return d.type, d.index

    return resolved(a) == resolved(b)


def _ray_is_initialized() -> bool:
    import ray

    return ray.is_initialized()
