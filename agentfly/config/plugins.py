"""Compose-time checks of the plug-ins a config names, asked of the registries themselves.

``agent.init_config.plugins`` is imported first (so what it registers is known), then every
registered name the config gives is looked up in its registry — the registry's own message
(close matches, known names) names the key — and the tools are bound to their
``agent.init_config.tool_config`` settings exactly as a run binds them
(:func:`agentfly.rollout.tools.bind.bind_tools`; a tool whose sandbox cannot run here is
refused there). The run's reward is checked with its ``agent.init_config.reward_config``
settings (:func:`agentfly.rollout.rewards.reward_config.reward_config_errors`: an LLM judge
without its server is refused, naming the keys to set). AgentFly's VLM judge rewards are refused
naming the service each needs (:mod:`agentfly.rollout.rewards.judges`), and its SWE rewards naming the container images they
need (:func:`agentfly.rollout.rewards.swe_rewards.swe_image_refusal`). A reward that runs code
in the sandbox (its ``sandbox_isolation`` attribute, ``code_reward``) is refused likewise where
that isolation cannot run, naming its opt-in (its ``sandbox_opt_in``, else ``code_reward``'s). A ``module:attr`` name is imported and registered here, so the run finds it under
that name.

The registries are imported inside :func:`plugin_errors`, keeping ``import agentfly.config``
light; none of them but the estimators' imports torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from agentfly.config.keys import plain
from agentfly.core.plugins import PluginError, import_plugin

# key → (module, registry attribute, names that are not looked up there)
REGISTERED_NAMES: dict[str, tuple[str, str, tuple[Any, ...]]] = {
    "actor_rollout_ref.actor.policy_loss.loss_mode": ("agentfly.modules.policy_losses", "POLICY_LOSSES", ()),
    "actor_rollout_ref.rollout.name": ("agentfly.rollout.engines", "ENGINES", ()),
    "agent.init_config.agent_type": ("agentfly.rollout.agents", "AGENTS", ()),
    "agent.init_config.tool_parser_name": ("agentfly.rollout.agents", "TOOL_PARSERS", (None,)),
    "agent.init_config.reward_name": ("agentfly.rollout.rewards", "REWARDS", (None, "")),
    "agent.init_config.template": (
        "agentfly.rollout.templates",
        "TEMPLATES",
        (None, "auto", "model"),
    ),
}


#: keys whose registered name an alias may spell (``hf``): the composed config holds the name
CANONICAL_NAMES = (
    "actor_rollout_ref.rollout.name",
    "agent.init_config.agent_type",
    "agent.init_config.tool_parser_name",
)


def canonical_names(cfg: Any) -> None:
    """Replace in ``cfg`` a registered alias by the name it stands for (AgentFly's and verl's
    ``hf`` by ``hermes`` for the agent type, ``transformers`` for the engine), so that the run
    compares one spelling."""
    from omegaconf import OmegaConf

    for key in CANONICAL_NAMES:
        name = OmegaConf.select(cfg, key)
        if isinstance(name, str):
            module, attr, _ = REGISTERED_NAMES[key]
            OmegaConf.update(cfg, key, getattr(importlib.import_module(module), attr).unalias(name))


def lookup_error(key: str, registry: Any, name: Any) -> str | None:
    """The problem with ``key=name`` as a name in ``registry``, or None (imports a ``module:attr``)."""
    try:
        registry.get(name)
    except (KeyError, ValueError) as e:  # UnknownNameError, PluginError, a name registered twice
        return f"{key}={name!r}: {e}"
    return None


def reward_sandbox_error(key: str, registry: Any, name: Any) -> str | None:
    """The problem with running the sandbox that reward ``name`` uses on this machine, or None."""
    try:
        fn = registry.get(name)
    except (KeyError, ValueError):  # reported by lookup_error
        return None
    isolation = getattr(fn, "sandbox_isolation", None)
    if isolation is None:
        return None
    from agentfly.rollout.execution.sandbox_isolation import isolation_problem
    from agentfly.rollout.rewards.code_rewards import REWARD_OPT_IN_KEY

    problem = isolation_problem(isolation, opt_in=getattr(fn, "sandbox_opt_in", REWARD_OPT_IN_KEY))
    return f"{key}={name!r} runs code in the sandbox: {problem}" if problem else None


def plugin_errors(get: Callable[[str], Any]) -> list[str]:
    """Import the plugins, then check every registered name and the tools' settings.

    Args:
        get: the config's value at a dotted key.

    Returns:
        The problems, each naming its key.
    """
    from agentfly.rollout.rewards.judges import judge_refusal
    from agentfly.rollout.rewards.reward_config import reward_config_errors
    from agentfly.rollout.rewards.swe_rewards import swe_image_refusal
    from agentfly.rollout.tools.bind import ToolConfigError, bind_tools

    errors = []
    for spec in plain(get("agent.init_config.plugins")) or []:
        try:
            import_plugin(spec)
        except PluginError as e:
            errors.append(f"agent.init_config.plugins: {e}")
    for key, (module, attr, skipped) in REGISTERED_NAMES.items():
        name = get(key)
        if name in skipped:
            continue
        registry = getattr(importlib.import_module(module), attr)
        # a judge or SWE image reward is refused unless a plugin registered that name itself
        why = (
            judge_refusal(name) or swe_image_refusal(name)
            if key == "agent.init_config.reward_name"
            else None
        )
        if why and name not in registry:
            errors.append(f"{key}={name!r} is not supported: {why}")
            continue
        errors += filter(None, [lookup_error(key, registry, name)])
        if key == "agent.init_config.reward_name":
            errors += filter(None, [reward_sandbox_error(key, registry, name)])
    errors += reward_config_errors(
        get("agent.init_config.reward_name"), plain(get("agent.init_config.reward_config"))
    )
    try:
        bind_tools(
            plain(get("agent.init_config.tools")), plain(get("agent.init_config.tool_config"))
        )
    except ToolConfigError as e:
        errors += e.problems
    return errors
