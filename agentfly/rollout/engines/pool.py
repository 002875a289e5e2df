"""A pool of generation engines: Ray actors (or one in-process engine) behind ``await generate``.

Created once and reused every training step. Requests wait in one queue; each engine has a
worker coroutine that takes every queued request, oldest first, up to ``max_batch_size`` rows,
and runs them as one batch (each prompt with its own sampling parameters), so many concurrent
agent chains asking for one turn each are batched, and an idle engine always takes the next
requests (the least-loaded engine serves them). A request with a ``seed`` samples from its own
generator, so its output does not depend on what else shares the batch.

``update_weights`` reaches every engine; an engine applies it after the batch it is running
(Ray runs an actor's calls one at a time; the in-process engine has a lock).

Ray: started on demand (``ray.init(num_cpus=..., _temp_dir=...)``) unless already initialised or
``RAY_ADDRESS`` names a cluster to join. ``num_engines=0`` or ``backend="local"`` keeps one engine
in this process. Under :func:`run_sync` (how the agent loop runs a rollout) it generates on the
calling thread, the one that also trains, while the event loop runs in a helper thread; otherwise
in a worker thread.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import os
import queue
import threading
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from agentfly.rollout.engines.base import GenerationOutput, SamplingParams, create_engine

if TYPE_CHECKING:
    from agentfly.rollout.engines.base import Weights

T = TypeVar("T")


class EngineHost:
    """Holds one engine; the body of a Ray actor (or used in-process as is).

    Args:
        engine: registered engine name, or a ``module:attr`` engine class.
        engine_kwargs: the engine's constructor arguments.
        num_threads: torch intra-op threads for this process (None leaves the default).
        plugins: the user's modules to import first (``agent.init_config.plugins``), so an
            engine they register is found in this process too.
    """

    def __init__(
        self,
        engine: str,
        engine_kwargs: dict[str, Any],
        num_threads: int | None = None,
        plugins: Sequence[str] = (),
    ) -> None:
        if num_threads:
            import torch

            torch.set_num_threads(num_threads)
        import agentfly.rollout.engines  # noqa: F401  (registers the built-in engines)
        from agentfly.plugins import load_plugins

        load_plugins(plugins)

        self.engine = create_engine(engine, **engine_kwargs)
        self._lock = threading.Lock()
        self.requests = 0
        self.weights_version = 0

    def generate(
        self, prompts: list[list[int]], sampling: SamplingParams | list[SamplingParams]
    ) -> list[list[GenerationOutput]]:
        with self._lock:
            self.requests += 1
            return self.engine.generate(prompts, sampling)

    def load_weights(self, weights: Weights) -> int:
        with self._lock:
            self.engine.load_weights(weights)
            self.weights_version += 1
            return self.weights_version

    def sleep(self) -> None:
        with self._lock:
            self.engine.sleep()

    def wake_up(self) -> None:
        with self._lock:
            self.engine.wake_up()

    def close(self) -> None:
        self.engine.close()

    def get_tokenizer(self) -> Any:
        return self.engine.tokenizer

    def stats(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "requests": self.requests,
            "weights_version": self.weights_version,
            "max_model_len": self.engine.max_model_len,
        }


def ensure_ray(num_cpus: int | None = None, temp_dir: str | None = None, **kwargs: Any) -> bool:
    """Initialise Ray if it is not: join ``RAY_ADDRESS`` when set, else start a local instance.

    Returns:
        True when this call started (or joined) Ray, False when it was already initialised.
    """
    import ray

    if ray.is_initialized():
        return False
    if os.environ.get("RAY_ADDRESS"):
        ray.init(address=os.environ["RAY_ADDRESS"], **kwargs)
    else:
        kwargs.setdefault("include_dashboard", False)
        ray.init(num_cpus=num_cpus, _temp_dir=temp_dir, **kwargs)
    return True


@dataclass
class _Request:
    prompts: list[list[int]]
    sampling: SamplingParams
    future: asyncio.Future = field(repr=False)


class EnginePool:
    """N engines behind one asynchronous ``generate``.

    Args:
        engine: registered engine name (``"hf"``, ``"vllm"``...).
        num_engines: engines to start; 0 means one in-process engine (``backend="local"``).
        engine_kwargs: constructor arguments of every engine (model path, dtype, max_model_len,
            device, seed...). With Ray, engine ``i`` gets ``seed + i`` so samples differ.
        backend: ``"ray"`` (actors) or ``"local"`` (in-process, for debugging).
        num_cpus_per_engine: Ray CPUs per actor (its torch thread count on GPU engines).
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
    """

    def __init__(
        self,
        engine: str = "hf",
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
    ) -> None:
        self.backend = "local" if num_engines == 0 else backend
        self.max_batch_size = max_batch_size
        kwargs = dict(engine_kwargs or {})
        self._started_ray = False
        if self.backend == "local":
            self._hosts: list[Any] = [EngineHost(engine, kwargs, plugins=plugins)]
        elif self.backend == "ray":
            import ray

            self._started_ray = ensure_ray(**(ray_init or {}))
            actor = ray.remote(num_cpus=num_cpus_per_engine, num_gpus=num_gpus_per_engine)(
                EngineHost
            )
            if num_threads is None and not num_gpus_per_engine:
                num_threads = (os.cpu_count() or 1) // max(1, num_engines)
            threads = max(1, int(num_threads or num_cpus_per_engine))
            self._hosts = [
                actor.remote(
                    engine, {**kwargs, "seed": kwargs.get("seed", 0) + i}, threads, list(plugins)
                )
                for i in range(num_engines)
            ]
        else:
            raise ValueError(f"backend must be 'ray' or 'local', got {backend!r}")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: collections.deque[_Request] = collections.deque()
        self._wakeup: asyncio.Event | None = None
        self._workers: list[asyncio.Task] = []
        self._tokenizer: Any = None
        self._caller: _CallerThread | None = None  # set by run_sync: the thread that generates
        self._caller_lock = threading.Lock()

    @property
    def num_engines(self) -> int:
        return len(self._hosts)

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
        """
        if not isinstance(sampling, SamplingParams):  # a worker could not batch it: fail here
            raise TypeError(
                f"sampling must be one SamplingParams for all prompts, got {type(sampling).__name__}"
            )
        if not prompts:
            return []
        if engine is not None:
            return await self._call(engine, "generate", prompts, sampling)
        self._ensure_workers()
        assert self._loop is not None and self._wakeup is not None
        request = _Request(prompts, sampling, self._loop.create_future())
        self._pending.append(request)
        self._wakeup.set()
        return await request.future

    def generate_sync(
        self, prompts: list[list[int]], sampling: SamplingParams
    ) -> list[list[GenerationOutput]]:
        """:meth:`generate` from synchronous code (see :func:`run_sync`)."""
        return run_sync(self, self.generate(prompts, sampling))

    def update_weights(self, weights: Weights) -> None:
        """Load new weights into every engine; returns once all have them.

        A state dict is put into the Ray object store once and shared by all actors; a path is
        read by each actor (it must be visible to every node).
        """
        if self.backend == "local":
            self._hosts[0].load_weights(weights)
            return
        import ray

        if not isinstance(weights, str | os.PathLike):
            from agentfly.rollout.engines.weights import read_weights

            cpu = {k: v.detach().to("cpu") for k, v in read_weights(weights).items()}
            weights = ray.put(cpu)
        ray.get([h.load_weights.remote(weights) for h in self._hosts])

    def sleep(self) -> None:
        self._broadcast("sleep")

    def wake_up(self) -> None:
        self._broadcast("wake_up")

    def stats(self) -> list[dict[str, Any]]:
        """Per engine: process id, requests served, weights version, max_model_len."""
        if self.backend == "local":
            return [self._hosts[0].stats()]
        import ray

        return ray.get([h.stats.remote() for h in self._hosts])

    @property
    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            if self.backend == "local":
                self._tokenizer = self._hosts[0].get_tokenizer()
            else:
                import ray

                self._tokenizer = ray.get(self._hosts[0].get_tokenizer.remote())
        return self._tokenizer

    @property
    def max_model_len(self) -> int:
        return self.stats()[0]["max_model_len"]

    def shutdown(self) -> None:
        """Stop the workers and the actors; stop Ray if this pool started it."""
        for task in self._workers:
            task.cancel()
        self._workers = []
        if self.backend == "ray":
            import ray

            for h in self._hosts:
                # let the engine free shared memory (vLLM) before the actor dies; a dead or
                # hung actor is killed all the same
                with contextlib.suppress(Exception):
                    ray.get(h.close.remote(), timeout=30)
                ray.kill(h)
            if self._started_ray:
                ray.shutdown()
        else:
            for h in self._hosts:
                h.close()
        self._hosts = []

    def __enter__(self) -> EnginePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # -- dispatch ---------------------------------------------------------------------------

    async def _call(self, index: int, method: str, *args: Any) -> Any:
        host = self._hosts[index]
        if self.backend == "local":
            caller = self._caller
            if caller is not None:
                return await asyncio.wrap_future(caller.submit(getattr(host, method), *args))
            return await asyncio.to_thread(getattr(host, method), *args)
        return await getattr(host, method).remote(*args)

    def _broadcast(self, method: str) -> None:
        if self.backend == "local":
            getattr(self._hosts[0], method)()
            return
        import ray

        ray.get([getattr(h, method).remote() for h in self._hosts])

    def _ensure_workers(self) -> None:
        """Start one worker per engine on the running loop (again if the loop changed)."""
        loop = asyncio.get_running_loop()
        if loop is self._loop and self._workers:
            return
        self._loop, self._wakeup, self._pending = loop, asyncio.Event(), collections.deque()
        self._workers = [loop.create_task(self._worker(i)) for i in range(self.num_engines)]

    def _take_batch(self) -> list[_Request]:
        """Queued requests, oldest first, up to ``max_batch_size`` rows (at least one)."""
        batch: list[_Request] = []
        rows = 0
        while self._pending:
            r = self._pending[0]
            if r.future.done():  # cancelled by its caller
                self._pending.popleft()
                continue
            extra = len(r.prompts) * r.sampling.n
            if batch and rows + extra > self.max_batch_size:
                break
            batch.append(self._pending.popleft())
            rows += extra
        return batch

    async def _worker(self, index: int) -> None:
        assert self._wakeup is not None
        while True:
            batch = self._take_batch()
            if not batch:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            prompts = [p for r in batch for p in r.prompts]
            params = [r.sampling for r in batch for _ in r.prompts]
            try:
                outputs = await self._call(index, "generate", prompts, params)
            except Exception as exc:
                if len(batch) == 1:
                    _resolve(batch[0], exc=exc)
                else:  # rerun one by one so only the offending request fails
                    for r in batch:
                        try:
                            _resolve(r, await self._call(index, "generate", r.prompts, r.sampling))
                        except Exception as single_exc:
                            _resolve(r, exc=single_exc)
                continue
            at = 0
            for r in batch:
                _resolve(r, outputs[at : at + len(r.prompts)])
                at += len(r.prompts)


def _resolve(request: _Request, result: Any = None, exc: BaseException | None = None) -> None:
    """Hand a result or an error to a request's caller (unless it gave up waiting)."""
    if request.future.done():
        return
    if exc is not None:
        request.future.set_exception(exc)
    else:
        request.future.set_result(result)


class _CallerThread:
    """Calls handed over by other threads, run one at a time on the thread that calls :meth:`serve`."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._open = True

    def submit(self, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            if self._open:
                self._jobs.put((future, fn, args))
                return future
        future.set_exception(RuntimeError("the thread that ran the engine has stopped serving it"))
        return future

    def close(self) -> None:
        """Let :meth:`serve` return once the calls queued so far have run."""
        self._jobs.put(None)

    def abandon(self) -> None:
        """Fail every queued and later call: the serving thread is leaving (an interrupt)."""
        with self._lock:
            self._open = False
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                return
            if job is not None and job[0].set_running_or_notify_cancel():
                job[0].set_exception(RuntimeError("the rollout was interrupted"))

    def serve(self) -> None:
        """Run submitted calls until :meth:`close`; their results and errors go to their futures."""
        while (job := self._jobs.get()) is not None:
            future, fn, args = job
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args))
                except Exception as exc:
                    future.set_exception(exc)
            del job, future, fn, args


def run_sync(engine: Any, coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)`` for code that calls ``engine``; an in-process engine generates here.

    With an in-process pool the event loop runs in a helper thread while this thread runs the
    engine's calls, so all torch work of a training process (rollout and update) stays on one
    thread. Generating on a second thread gave torch a second OpenMP thread team; with more
    OpenMP threads than cores libgomp stops spinning between parallel regions and wakes its
    threads through the kernel for each one, which a small model's decode step is made of:
    measured on the W3 benchmark (2 cores), the engine's time 0.075 -> 0.047 s per rollout.

    Engines in other processes (Ray), or a pool already serving another call of this function,
    are called from the loop's own thread as usual (``asyncio.run``).
    """
    if not isinstance(engine, EnginePool) or engine.backend != "local":
        return asyncio.run(coro)
    with engine._caller_lock:
        if engine._caller is not None:
            caller = None
        else:
            caller = engine._caller = _CallerThread()
    if caller is None:
        return asyncio.run(coro)
    box: dict[str, Any] = {}

    async def main() -> T:
        box["loop"], box["task"] = asyncio.get_running_loop(), asyncio.current_task()
        return await coro

    def loop_thread() -> None:
        try:
            box["result"] = asyncio.run(main())
        except BaseException as exc:  # handed to the calling thread
            box["error"] = exc
        finally:
            caller.close()

    thread = threading.Thread(target=loop_thread, name="agentfly-rollout-loop", daemon=True)
    thread.start()
    try:
        caller.serve()
    except BaseException:  # e.g. KeyboardInterrupt: end the rollout, then pass it on
        caller.abandon()
        with contextlib.suppress(RuntimeError, KeyError):  # no loop yet, or already closed
            box["loop"].call_soon_threadsafe(box["task"].cancel)
        thread.join(timeout=30)
        raise
    finally:
        engine._caller = None
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["result"]
