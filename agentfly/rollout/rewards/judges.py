"""AgentFly's VLM judge rewards: refused when the config is composed, naming what they need.

AgentFly registers four rewards that score a chain by asking another model
(``src/agentfly/rewards/llm_as_judge/`` and ``vlm_as_judge/simuscene_reward.py``). The two LLM
judges, ``llm_as_judge_reward`` and ``llm_as_judge_math_reward``, run here
(:mod:`agentfly.rollout.rewards.llm_judge`), given their server
(``agent.init_config.reward_config``, checked by
:func:`~agentfly.rollout.rewards.reward_config.reward_config_errors`). The two VLM judges,
``vlm_as_judge_pass_reward`` and ``vlm_as_judge_pass_reward_multi_model`` (Simuscene), run the
Python code of the chain's answer to render a video, then ask vision-language models about it:
one per entry of the environment variables ``VLM_MODELS`` and ``VLM_SERVER_IPS``
(comma-separated, the same length; each server an OpenAI-compatible endpoint on port 8000).

agentfly has no client for such a service nor a video renderer, so each VLM judge is refused
with what it needs; where ``VLM_MODELS`` and ``VLM_SERVER_IPS`` are set, the message says that
the service is configured and the reward is refused all the same, for want of them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

VLM_REWARDS = ("vlm_as_judge_pass_reward", "vlm_as_judge_pass_reward_multi_model")
# for a VLM judge: the LLM judges' client (llm_judge.py) sends no images nor video
NO_CLIENT = "agentfly has no client for a judge service"


def _csv(environ: Mapping[str, str], name: str) -> list[str]:
    return [item.strip() for item in environ.get(name, "").split(",") if item.strip()]


def _vlm_refusal(environ: Mapping[str, str]) -> str:
    models, ips = _csv(environ, "VLM_MODELS"), _csv(environ, "VLM_SERVER_IPS")
    needs = (
        "it needs a VLM judge service (the models in VLM_MODELS, served OpenAI-compatible on "
        "port 8000 of the hosts in VLM_SERVER_IPS, comma-separated, the same length) and a "
        "video rendered from the chain's Python code"
    )
    if not models or not ips:
        unset = [n for n, v in (("VLM_MODELS", models), ("VLM_SERVER_IPS", ips)) if not v]
        return f"{needs}; {' and '.join(unset)} not set, and {NO_CLIENT} nor a video renderer"
    if len(models) != len(ips):
        return (
            f"{needs}; VLM_MODELS names {len(models)} models but VLM_SERVER_IPS {len(ips)} "
            f"servers, and {NO_CLIENT} nor a video renderer"
        )
    return (
        f"VLM_MODELS and VLM_SERVER_IPS are set ({len(models)} judge server(s)), but {NO_CLIENT} "
        "nor the video renderer the reward scores (AgentFly's Simuscene VideoGenerator), so it "
        "is refused all the same"
    )


def judge_refusal(name: object, environ: Mapping[str, str] | None = None) -> str | None:
    """Why the VLM judge reward ``name`` cannot run here (None: ``name`` is no VLM judge).

    Args:
        name: a reward name.
        environ: the environment to read ``VLM_MODELS``/``VLM_SERVER_IPS`` from (the process's).
    """
    if name in VLM_REWARDS:
        return _vlm_refusal(os.environ if environ is None else environ)
    return None
