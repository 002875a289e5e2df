"""The body of an engine's Ray actor, and starting (or joining) Ray."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agentfly.rollout.engines.base import GenerationOutput, SamplingParams, create_engine

if TYPE_CHECKING:
    from agentfly.rollout.engines.base import Weights


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
        import agentfly.rollout.engines.builtin  # noqa: F401  (registers the built-in engines)
        from agentfly.core.plugins import load_plugins

        load_plugins(plugins)

        self.engine = create_engine(engine, **engine_kwargs)
        self._lock = threading.Lock()
        self.requests = 0
        self.weights_version = 0
        self._pending: dict[str, Any] = {}  # the buckets of a push so far (load_weights_bucket)

    def generate(
        self, prompts: list[list[int]], sampling: SamplingParams | list[SamplingParams]
    ) -> list[list[GenerationOutput]]:
        with self._lock:
            self.requests += 1
            outputs = self.engine.generate(prompts, sampling)
            for samples in outputs:
                for out in samples:
                    if isinstance(out, GenerationOutput):
                        out.weights_version = self.weights_version
            return outputs

    def load_weights(self, weights: Weights, version: int | None = None) -> int:
        """Load ``weights``, named ``version`` (None: the next number); returns the version."""
        with self._lock:
            self.engine.load_weights(weights)
            self.weights_version = self.weights_version + 1 if version is None else int(version)
            return self.weights_version

    def load_weights_bucket(self, bucket: Any, version: int | None, last: bool) -> int | None:
        """One bucket of a push in buckets (:meth:`EnginePool.update_weights`): a state dict, or a
        :class:`~agentfly.core.weights.LoraAdapter` holding part of the adapter's tensors. Kept
        until the ``last`` arrives; then the whole is loaded at once (:meth:`load_weights`), so
        the engine never serves a mix of old and new weights. Returns the version then, else None.
        """
        from agentfly.core.weights import LoraAdapter
        from agentfly.rollout.engines.weights import read_weights

        adapter = isinstance(bucket, LoraAdapter)
        self._pending.update(bucket.weights if adapter else read_weights(bucket))
        if not last:
            return None
        state, self._pending = self._pending, {}
        return self.load_weights(LoraAdapter(config=bucket.config, weights=state) if adapter else state, version)

    def sleep(self) -> None:
        with self._lock:
            self.engine.sleep()

    def wake_up(self) -> None:
        with self._lock:
            self.engine.wake_up()

    def free_prefix_cache(self) -> int:
        """Drop the engine's prefix cache once its running batch ends; returns the bytes freed."""
        with self._lock:
            return self.engine.free_prefix_cache()

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
            **self.engine.stats(),
        }


#: where Ray says that a local instance it starts takes its default, token authentication
RAY_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"


def _quiet_token_default(record: logging.LogRecord) -> bool:
    """Drop Ray's notice that the instance agentfly starts on this machine uses Ray's default
    (token authentication): nothing to act on (``RAY_AUTH_MODE=disabled`` still opts out)."""
    return not record.getMessage().startswith("Token authentication is enabled for this Ray cluster")


#: the nice value of the worker processes of a Ray started here (Ray's default, 15, is for
#: background work): the engine actors are the run's compute, and at 15 an engine that shares
#: the cores with other work gets next to none of them (importing torch took minutes).
RAY_WORKER_NICENESS = 0


def ensure_ray(num_cpus: int | None = None, temp_dir: str | None = None, **kwargs: Any) -> bool:
    """Initialise Ray if it is not: join ``RAY_ADDRESS`` when set, else start a local instance,
    whose workers (the engine and resource actors) run at ``RAY_WORKER_NICENESS``, as the trainer.

    Returns:
        True when this call started (or joined) Ray, False when it was already initialised.
    """
    import ray

    from agentfly.core.shutdown import sigterm_kept

    if ray.is_initialized():
        return False
    with sigterm_kept():  # a SIGTERM while Ray starts ends the run in order, not with Ray's exit(15)
        if os.environ.get("RAY_ADDRESS"):
            ray.init(address=os.environ["RAY_ADDRESS"], **kwargs)
        else:
            kwargs.setdefault("include_dashboard", False)
            system = {"worker_niceness": RAY_WORKER_NICENESS, **kwargs.get("_system_config", {})}
            kwargs["_system_config"] = system
            logging.getLogger(RAY_AUTH_LOGGER).addFilter(_quiet_token_default)
            ray.init(num_cpus=num_cpus, _temp_dir=temp_dir, **kwargs)
    return True
