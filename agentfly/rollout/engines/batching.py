"""Request batching for the engine pool: one queue, one worker coroutine per engine.

Requests wait in one queue; each engine's worker takes every queued request, oldest first, up
to ``max_batch_size`` rows, and runs them as one engine call (each prompt with its own sampling
parameters). Many concurrent agent chains asking for one turn each are thus batched, and an
idle engine always takes the next requests (the least-loaded engine serves them).
"""

from __future__ import annotations

import asyncio
import collections
import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from agentfly.rollout.engines.base import GenerationOutput, SamplingParams
from agentfly.rollout.engines.errors import EngineLostError

#: ``generate(engine_index, prompts, sampling)``: one engine call.
EngineCall = Callable[
    [int, list[list[int]], SamplingParams | list[SamplingParams]],
    Awaitable[list[list[GenerationOutput]]],
]


@dataclass
class _Request:
    prompts: list[list[int]]
    sampling: SamplingParams
    future: asyncio.Future = field(repr=False)


class RequestBatcher:
    """Merges queued requests into batches and serves them on the live engines.

    The workers run on the event loop of the latest :meth:`submit` (they are started again when
    the loop changes, e.g. one ``asyncio.run`` per rollout).

    Args:
        generate: runs one merged batch on an engine.
        live: indices of the engines still serving; a worker ends when its engine leaves.
        max_batch_size: rows (prompts × n) one merged batch may hold.
        lose: drops an engine from the pool, with the reason (None: engines never leave).
        none_left: the error every queued request gets once the last worker has ended
            (None: engines never leave).
    """

    def __init__(
        self,
        generate: EngineCall,
        live: Callable[[], list[int]],
        max_batch_size: int,
        *,
        lose: Callable[[int, str], None] | None = None,
        none_left: Callable[[], BaseException] | None = None,
    ) -> None:
        self._generate = generate
        self._live = live
        self.max_batch_size = max_batch_size
        self._lose = lose
        self._none_left = none_left
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: collections.deque[_Request] = collections.deque()
        self._wakeup: asyncio.Event | None = None
        self._workers: list[asyncio.Task] = []

    async def submit(
        self, prompts: list[list[int]], sampling: SamplingParams
    ) -> list[list[GenerationOutput]]:
        """Queue a request and wait for its outputs (one list per prompt)."""
        self._ensure_workers()
        assert self._loop is not None and self._wakeup is not None
        request = _Request(prompts, sampling, self._loop.create_future())
        self._pending.append(request)
        self._wakeup.set()
        return await request.future

    def cancel(self) -> None:
        """Stop the workers (the requests they hold are not answered)."""
        for task in self._workers:
            task.cancel()
        self._workers = []

    def _ensure_workers(self) -> None:
        """Start one worker per live engine on the running loop (again if the loop changed)."""
        loop = asyncio.get_running_loop()
        if loop is self._loop and self._workers:
            return
        self._loop, self._wakeup, self._pending = loop, asyncio.Event(), collections.deque()
        self._workers = []
        for i in self._live():
            task = loop.create_task(self._worker(i))
            task.add_done_callback(functools.partial(self._worker_ended, i))
            self._workers.append(task)

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
        """Serve batches on engine ``index`` until it leaves the pool."""
        assert self._wakeup is not None
        while index in self._live():
            batch = self._take_batch()
            if not batch:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            try:
                await self._serve(index, batch)
            except Exception as exc:  # a fault of the pool itself: fail the batch, serve on
                for r in batch:
                    _resolve(r, exc=exc)

    async def _serve(self, index: int, batch: list[_Request]) -> None:
        """Run ``batch`` as one call on engine ``index`` and hand each request its outputs."""
        prompts = [p for r in batch for p in r.prompts]
        params = [r.sampling for r in batch for _ in r.prompts]
        try:
            outputs = await self._generate(index, prompts, params)
        except EngineLostError as exc:  # the engine is gone: rerunning on it cannot help
            for r in batch:
                _resolve(r, exc=exc)
            return
        except Exception as exc:
            if len(batch) == 1:
                _resolve(batch[0], exc=exc)
                return
            for r in batch:  # rerun one by one so only the offending request fails
                try:
                    _resolve(r, await self._generate(index, r.prompts, r.sampling))
                except Exception as single_exc:
                    _resolve(r, exc=single_exc)
            return
        at = 0
        for r in batch:
            _resolve(r, outputs[at : at + len(r.prompts)])
            at += len(r.prompts)

    def _worker_ended(self, index: int, task: asyncio.Task) -> None:
        """A worker ends when its engine leaves the pool; the last one fails the queue."""
        if task.cancelled() or self._lose is None or task.get_loop() is not self._loop:
            return
        exc = task.exception()
        if exc is not None:  # it cannot: _worker catches what _serve raises
            self._lose(index, f"the pool's worker for engine {index} failed: {exc!r}")
        if not self._live() and self._none_left is not None:
            error = self._none_left()
            while self._pending:
                _resolve(self._pending.popleft(), exc=error)


def _resolve(request: _Request, result: Any = None, exc: BaseException | None = None) -> None:
    """Hand a result or an error to a request's caller (unless it gave up waiting)."""
    if request.future.done():
        return
    if exc is not None:
        request.future.set_exception(exc)
    else:
        request.future.set_result(result)
