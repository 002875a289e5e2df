"""Engine actors on Ray, every call under a deadline.

Ray waits without end on an actor nobody can place and on a call an engine never finishes; here
each wait has a limit. Before creating the actors, :func:`check_capacity` asks whether the
cluster can hold them; then every engine must come up within ``engine_start_timeout_s`` (a
failed constructor is reported with its error). Afterwards an engine that dies, or whose call
passes its deadline (its actor is then killed), leaves the set with the reason; the others
serve on, and a call that finds none left raises :class:`EngineLostError` naming them all.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentfly.rollout.engines.capacity import check_capacity
from agentfly.rollout.engines.errors import (
    EngineLostError,
    EngineStartError,
    EngineTimeoutError,
    summarize_ray_error,
)
from agentfly.rollout.engines.host import EngineHost

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Deadlines:
    """Seconds each kind of wait on the engines may take (see :class:`EnginePool`)."""

    resource_wait_s: float = 10.0
    engine_start_timeout_s: float = 600.0
    generate_timeout_s: float = 600.0
    weights_timeout_s: float = 600.0
    call_timeout_s: float = 120.0
    shutdown_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        for key, seconds in vars(self).items():
            if not seconds > 0:
                raise ValueError(f"EnginePool {key} must be > 0 seconds, got {seconds}")

    def of(self, method: str) -> tuple[float, str]:
        """The deadline of an engine method, and the name of the setting that holds it."""
        weights = "weights_timeout_s"
        key = {"generate": "generate_timeout_s", "load_weights": weights, "load_weights_bucket": weights}.get(
            method, "call_timeout_s"
        )
        return getattr(self, key), key


class RayEngines:
    """``num_engines`` :class:`EngineHost` actors; created only when the cluster can hold them.

    Args:
        engine: registered engine name.
        num_engines: actors to start.
        engine_kwargs: every engine's constructor arguments; engine ``i`` gets ``seed + i``.
        num_cpus: Ray CPUs per actor.
        num_gpus: Ray GPUs per actor.
        num_threads: torch intra-op threads per actor.
        deadlines: how long each kind of wait may take.
        plugins: modules each actor imports before it builds its engine.

    Raises:
        EngineCapacityError: the cluster cannot hold the actors (nothing was created).
        EngineStartError: an engine failed to build, or not all came up in time (every actor
            created is killed).
    """

    def __init__(
        self,
        engine: str,
        num_engines: int,
        engine_kwargs: dict[str, Any],
        *,
        num_cpus: float,
        num_gpus: float,
        num_threads: int,
        deadlines: Deadlines,
        plugins: Sequence[str] = (),
    ) -> None:
        import ray

        self.deadlines = deadlines
        self.lost: dict[int, str] = {}  # engine index -> why it left
        check_capacity(num_engines, num_cpus, num_gpus, wait_s=deadlines.resource_wait_s)
        actor = ray.remote(num_cpus=num_cpus, num_gpus=num_gpus)(EngineHost)
        seed = engine_kwargs.get("seed", 0)
        self.hosts: list[Any] = []
        try:
            for i in range(num_engines):
                kwargs = {**engine_kwargs, "seed": seed + i}
                self.hosts.append(actor.remote(engine, kwargs, num_threads, list(plugins)))
            self._wait_until_up(f"{engine!r}")
        except BaseException:
            self.kill()
            raise

    def _wait_until_up(self, engine: str) -> None:
        import ray

        n, timeout = len(self.hosts), self.deadlines.engine_start_timeout_s
        deadline = time.monotonic() + timeout
        waiting = {h.stats.remote(): i for i, h in enumerate(self.hosts)}
        while waiting:
            left = max(0.0, deadline - time.monotonic())
            done, _ = ray.wait(list(waiting), num_returns=1, timeout=left)
            if not done:
                free = ray.available_resources()
                late = ", ".join(str(i) for i in sorted(waiting.values()))
                raise EngineStartError(
                    f"engine(s) {late} of {n} ({engine}) did not come up within {timeout:g} s "
                    "(EnginePool engine_start_timeout_s): still loading the model, or waiting "
                    f"for resources that are not free (the cluster has {free.get('CPU', 0):g} "
                    f"CPUs, {free.get('GPU', 0):g} GPUs free now)"
                )
            index = waiting.pop(done[0])
            try:
                ray.get(done[0])
            except ray.exceptions.RayActorError as exc:
                raise EngineStartError(
                    f"engine {index} of {n} ({engine}) did not start: {summarize_ray_error(exc)}"
                ) from exc

    def live(self) -> list[int]:
        """Indices of the engines still serving."""
        return [i for i in range(len(self.hosts)) if i not in self.lost]

    def none_left(self) -> EngineLostError:
        reasons = "; ".join(self.lost[i] for i in sorted(self.lost))
        return EngineLostError(f"no engine is left in the pool ({reasons})")

    def lose(self, index: int, reason: str) -> None:
        """Drop engine ``index`` (its actor is killed); the others serve on."""
        if index in self.lost:
            return
        import ray

        self.lost[index] = reason
        logger.warning(
            "%s; the pool goes on with %d of %d engines", reason, len(self.live()), len(self.hosts)
        )
        with contextlib.suppress(Exception):
            ray.kill(self.hosts[index])

    def _timed_out(self, index: int, method: str) -> str:
        seconds, key = self.deadlines.of(method)
        self.lose(index, f"engine {index} did not finish {method} within {seconds:g} s ({key})")
        return self.lost[index]

    def _died(self, index: int, exc: BaseException) -> str:
        """Why engine ``index`` is gone: the reason it was dropped for, else its death."""
        self.lose(index, f"engine {index} died: {summarize_ray_error(exc)}")
        return self.lost[index]

    async def call(self, index: int, method: str, *args: Any) -> Any:
        """``method(*args)`` on engine ``index``, awaited under its deadline.

        Raises:
            EngineTimeoutError: the deadline passed (the engine leaves).
            EngineLostError: the engine has died, now or before.
        """
        import ray

        if index in self.lost:
            raise EngineLostError(self.lost[index])
        seconds, _ = self.deadlines.of(method)
        ref = getattr(self.hosts[index], method).remote(*args)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(ref.future()), seconds)
        except (TimeoutError, asyncio.TimeoutError):  # one class from 3.11 on, two on 3.10
            raise EngineTimeoutError(self._timed_out(index, method)) from None
        except ray.exceptions.RayActorError as exc:
            raise EngineLostError(self._died(index, exc)) from exc

    def call_all(self, method: str, *args: Any, engines: list[int] | None = None) -> list[Any]:
        """``method(*args)`` on every live engine (or on ``engines``), under one deadline.

        Returns:
            The answers of the engines that gave one, in engine order; an engine that died or
            passed the deadline leaves instead. An error the method raised is raised here.

        Raises:
            EngineLostError: no engine is left.
        """
        import ray

        targets = self.live() if engines is None else engines
        if not targets:
            raise self.none_left()
        seconds, _ = self.deadlines.of(method)
        refs = [getattr(self.hosts[i], method).remote(*args) for i in targets]
        done, _ = ray.wait(refs, num_returns=len(refs), timeout=seconds)
        answered = set(done)
        results = []
        for index, ref in zip(targets, refs, strict=True):
            if ref not in answered:
                self._timed_out(index, method)
                continue
            try:
                results.append(ray.get(ref))
            except ray.exceptions.RayActorError as exc:
                self._died(index, exc)
        if not self.live():
            raise self.none_left()
        return results

    def close(self) -> None:
        """Let the live engines free their resources (up to ``shutdown_timeout_s``), then kill."""
        import ray

        with contextlib.suppress(Exception):
            closing = [self.hosts[i].close.remote() for i in self.live()]
            if closing:
                ray.wait(
                    closing, num_returns=len(closing), timeout=self.deadlines.shutdown_timeout_s
                )
        self.kill()

    def kill(self) -> None:
        import ray

        for host in self.hosts:
            with contextlib.suppress(Exception):
                ray.kill(host)
