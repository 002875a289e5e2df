"""Per-run reward settings: ``agent.init_config.reward_config.<reward>.<setting>``.

Only the rewards in :data:`CONFIGURABLE` take settings: AgentFly's two LLM judges, whose
:class:`~agentfly.rollout.rewards.llm_judge.JudgeSettings` say where their server is and which
need ``base_url`` and ``model``. :func:`reward_config_errors` checks the key when the config is
composed (an entry for a reward the run does not use, or one that takes no settings, an unknown
or bad setting, a judge without its server: each refused, naming its key);
:func:`configure_reward` binds the run's reward to its settings when the rollout is built,
giving the agent loop a copy (the registered reward is unchanged, as a tool's is by
``tool_config``).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib.util
import os
from collections.abc import Mapping
from typing import Any

from agentfly.core.errors import InputError
from agentfly.rollout.rewards.llm_judge import JUDGES, JudgeSettings
from agentfly.rollout.rewards.registry import RewardFn, info_of

KEY = "agent.init_config.reward_config"

#: reward name → (its settings class, its implementation taking the settings first)
CONFIGURABLE: dict[str, tuple[type, Any]] = {
    name: (JudgeSettings, impl) for name, impl in JUDGES.items()
}

#: what each judge's required settings are, in the refusal's words
_REQUIRED = {
    "base_url": "an OpenAI-compatible server's API root, e.g. http://host:8000/v1",
    "model": "the model it serves",
}


class RewardConfigError(InputError):
    """``agent.init_config.reward_config`` cannot be used; the message names each key."""


def _needs_service(name: str, missing: list[str]) -> str:
    keys = " and ".join(f"{KEY}.{name}.{k} ({_REQUIRED[k]})" for k in missing)
    return (
        f"agent.init_config.reward_name={name!r} needs an LLM judge service: set {keys}"
        "; AgentFly's judge was Qwen/Qwen2.5-72B-Instruct at http://10.24.0.80:8000/v1"
    )


def _settings_errors(name: str, values: Any) -> list[str]:
    where = f"{KEY}.{name}"
    if not isinstance(values, Mapping):
        return [f"{where} must map setting names to values, got {values!r}"]
    settings_type = CONFIGURABLE[name][0]
    accepted = [f.name for f in dataclasses.fields(settings_type)]
    unknown = [k for k in values if k not in accepted]
    if unknown:
        out = []
        for k in unknown:
            close = difflib.get_close_matches(str(k), accepted, n=2)
            hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
            out.append(
                f"{where}.{k}: reward {name!r} has no such setting{hint} (accepted: {', '.join(accepted)})"
            )
        return out
    missing = [k for k in _REQUIRED if values.get(k) in (None, "")]
    if missing:
        return [_needs_service(name, missing)]
    try:
        settings = settings_type(**values)
    except ValueError as e:
        return [f"{where}: {e}"]
    env = settings.api_key_env
    if env is not None and not os.environ.get(env):
        return [f"{where}.api_key_env: the variable {env} holding the judge's API key is not set"]
    if importlib.util.find_spec("openai") is None:
        return [
            f"{where}: the judge client needs the openai package: pip install 'agentfly[judge]'"
        ]
    return []


def reward_config_errors(
    reward_name: str | None, reward_config: Mapping[str, Any] | None
) -> list[str]:
    """The problems with ``reward_config`` for a run scored by ``reward_name``, each naming its key.

    A judge reward named by ``reward_name`` without ``base_url`` and ``model`` is refused, naming
    the keys to set.
    """
    problems = []
    reward_config = reward_config or {}
    for name, values in reward_config.items():
        if name not in CONFIGURABLE:
            problems.append(
                f"{KEY}.{name}: reward {name!r} takes no settings (those that do: "
                f"{', '.join(CONFIGURABLE)})"
            )
        elif name != reward_name:
            problems.append(
                f"{KEY}.{name}: reward {name!r} is not agent.init_config.reward_name "
                f"({reward_name!r}); set it there or drop these settings"
            )
        else:
            problems += _settings_errors(name, values)
    if reward_name in CONFIGURABLE and reward_name not in reward_config:
        problems.append(_needs_service(reward_name, list(_REQUIRED)))
    return problems


def configure_reward(reward_name: str, reward_config: Mapping[str, Any] | None) -> str | RewardFn:
    """What the agent loop scores with: ``reward_name`` itself, or for a reward that takes
    settings, a copy of it bound to its ``reward_config`` entry.

    Raises:
        RewardConfigError: :func:`reward_config_errors`' problems.
    """
    problems = reward_config_errors(reward_name, reward_config)
    if problems:
        raise RewardConfigError("\n".join(problems))
    if reward_name not in CONFIGURABLE:
        return reward_name
    settings_type, impl = CONFIGURABLE[reward_name]
    bound = functools.partial(impl, settings_type(**(reward_config or {})[reward_name]))
    bound.reward_info = info_of(reward_name)[1]  # its name, timeout and where it runs
    return bound
