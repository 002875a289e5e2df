"""The built-in engines (``scripted``, ``transformers``, ``vllm``): importing this module registers them,
without importing torch, transformers or vLLM. The package and an engine actor import it."""

import agentfly.rollout.engines.scripted
import agentfly.rollout.engines.transformers_engine
import agentfly.rollout.engines.vllm  # noqa: F401
