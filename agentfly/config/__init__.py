"""The config layer: typed schema, key aliases, Hydra-style overrides, compose + validate.

>>> from agentfly.config import config_to_yaml, load_config
>>> cfg = load_config(
...     ["agent.max_turns=5", "trainer.total_training_steps=10"],
...     config_file="conf/examples/gsm8k_calculator.yaml",
... )
>>> cfg.agent.run_config.max_turns
5

``load_config`` returns a read-only OmegaConf ``DictConfig`` backed by :class:`AgentflyConfig`
(``OmegaConf.to_object(cfg)`` gives the dataclass instances); see :mod:`agentfly.config.load`
for the layering, :mod:`agentfly.config.aliases` for the alternative spellings and
:mod:`agentfly.config.validate` for the checks (and the mini-batch semantics).
"""

from agentfly.config.aliases import ALIASES, canonical_key
from agentfly.config.errors import ConfigError
from agentfly.config.load import config_to_yaml, load_config
from agentfly.config.overrides import Override, parse_overrides
from agentfly.config.schema import AgentflyConfig
from agentfly.config.validate import validate

__all__ = [
    "ALIASES",
    "AgentflyConfig",
    "ConfigError",
    "Override",
    "canonical_key",
    "config_to_yaml",
    "load_config",
    "parse_overrides",
    "validate",
]
