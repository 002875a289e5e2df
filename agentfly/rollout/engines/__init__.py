"""Generation engines behind one interface, and the Ray pool that serves them.

``create_engine("transformers", model=path)`` builds one engine; :class:`EnginePool` holds several (Ray
actors, or one in-process engine for debugging). Importing this package registers the built-in
engines without importing torch or transformers.
"""

import agentfly.rollout.engines.builtin  # noqa: F401  (registers the engines)
from agentfly.rollout.engines.base import (
    ENGINES,
    Engine,
    GenerationOutput,
    SamplingParams,
    create_engine,
    register_engine,
)
from agentfly.rollout.engines.capacity import EngineCapacityError
from agentfly.rollout.engines.errors import EngineLostError, EngineStartError, EngineTimeoutError
from agentfly.rollout.engines.pool import EnginePool

__all__ = [
    "ENGINES",
    "Engine",
    "EngineCapacityError",
    "EngineLostError",
    "EnginePool",
    "EngineStartError",
    "EngineTimeoutError",
    "GenerationOutput",
    "SamplingParams",
    "create_engine",
    "register_engine",
]
