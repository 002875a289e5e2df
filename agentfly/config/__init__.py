"""The config layer: verl's typed sections, their spellings, and the checks across keys.

LightningCLI (:mod:`agentfly.cli`) parses; what stays here is what it does not do: the schema
of verl's sections (:mod:`~agentfly.config.schema`, the CLI's groups), the translation of
AgentFly's and verl's words, spellings and YAML files into LightningCLI arguments
(:mod:`~agentfly.config.verl_args`, :mod:`~agentfly.config.aliases`,
:mod:`~agentfly.config.overrides`), and composing the parsed result into the tree a run reads,
with the checks that need several keys (:mod:`~agentfly.config.load`,
:mod:`~agentfly.config.validate`, :mod:`~agentfly.config.inactive`), the registries
(:mod:`~agentfly.config.plugins`).

>>> from agentfly.cli import load_config
>>> cfg = load_config(
...     ["agent.max_turns=5", "trainer.total_training_steps=10"],
...     config_file="conf/examples/gsm8k_calculator.yaml",
... )
>>> cfg.agent.run_config.max_turns
5

``load_config`` (:mod:`agentfly.cli`, which builds the parser) returns a read-only OmegaConf
``DictConfig``; the config layer never imports the command line.
"""

from agentfly.config.aliases import ALIASES, canonical_key
from agentfly.config.load import config_to_yaml
from agentfly.config.overrides import Override, parse_overrides
from agentfly.config.validate import validate
from agentfly.core.errors import ConfigError

__all__ = [
    "ALIASES",
    "ConfigError",
    "Override",
    "canonical_key",
    "config_to_yaml",
    "parse_overrides",
    "validate",
]
