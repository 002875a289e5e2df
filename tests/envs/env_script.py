"""A scripted engine for environment chains, a tool on an environment that fails on purpose, and a
run's plug-in of them (``agent.init_config.plugins=[tests.envs.env_script]``).

``env_script`` plays, for the data row whose ``question`` the prompt holds, one of that row's
scripts (lists of assistant turns), chosen by the chain's sampling seed: ``seed % len(scripts)``
(the first without a seed). The chains of one group have consecutive seeds, so a row with a gold
and a wrong script gets one chain of each in every group of two. In a fit the scripts come from
the JSON file named by ``AGENTFLY_ENV_SCRIPTS`` (``{"scripts": {question: [[turn, ...], ...]},
"delay_s": seconds per generate}``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Any

from agentfly.rollout.engines.base import GenerationOutput, per_prompt, register_engine
from agentfly.rollout.engines.scripted import ScriptedEngine
from agentfly.rollout.rewards import reward
from agentfly.rollout.tools.environment import EnvSettings, act, env_tool

SCRIPTS_FILE = "AGENTFLY_ENV_SCRIPTS"


def action(text: str) -> str:
    return f"<think>next</think><action>{text}</action>"


def write_scripts(path: Path, scripts: dict[str, list[list[str]]], delay_s: float = 0.0) -> Path:
    path.write_text(json.dumps({"scripts": scripts, "delay_s": delay_s}))
    return path


@register_engine("env_script")
class EnvScript(ScriptedEngine):
    """Replays a row's scripts turn by turn (see the module docstring)."""

    def __init__(self, model: Any, scripts: dict[str, list[list[str]]] | None = None, **kwargs: Any) -> None:
        kwargs.pop("script", None)
        delay_s = kwargs.pop("delay_s", 0.0)
        if scripts is None:
            given = json.loads(Path(os.environ[SCRIPTS_FILE]).read_text())
            scripts, delay_s = given["scripts"], given.get("delay_s", 0.0)
        super().__init__(model, script=["(unused)"], delay_s=delay_s, **kwargs)
        self.scripts = scripts

    def generate(self, prompts, sampling):
        if self.delay_s:
            time.sleep(self.delay_s)
        outputs = []
        for prompt, sp in zip(prompts, per_prompt(prompts, sampling), strict=True):
            text = self._tokenizer.decode(prompt, skip_special_tokens=False)
            question = next(q for q in self.scripts if q in text)
            options = self.scripts[question]
            turns = options[(sp.seed or 0) % len(options)]
            turn = max(text.count(self.turn_marker) - 1, 0)
            reply = turns[min(turn, len(turns) - 1)] + self.end_of_turn
            ids = self._tokenizer.encode(reply, add_special_tokens=False)[: sp.max_tokens]
            outputs.append([GenerationOutput(ids, [self.logprob] * len(ids), "stop")] * sp.n)
        return outputs


def env_fit(run, model, data, tools, reward, *, agent="action", template="action-agent", max_turns=8, iterations=2,
            chains=2, extra=()):
    """``agentfly fit`` arguments: the tiny ``model`` on ``data`` (one row a batch, ``chains``
    chains), the ``env_script`` engine of this plug-in, ``tools`` and ``reward``."""
    return [
        "fit", f"data.train_files={data}", "data.train_batch_size=1",
        f"agent.init_config.model_name_or_path={model}", "agent.init_config.plugins=[tests.envs.env_script]",
        f"agent.init_config.agent_type={agent}", f"agent.init_config.template={template}",
        f"agent.init_config.tools=[{','.join(tools)}]", f"agent.init_config.reward_name={reward}",
        "agent.init_config.max_model_len=4096", f"agent.run_config.num_chains={chains}",
        f"agent.run_config.max_turns={max_turns}", "agent.run_config.generation_config.max_tokens=64",
        "actor_rollout_ref.rollout.response_length=3500", "algorithm.adv_estimator=grpo",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={chains}", "actor_rollout_ref.actor.optim.lr=1e-3",
        "actor_rollout_ref.rollout.name=env_script", "actor_rollout_ref.rollout.num_engines=0",
        "trainer.n_gpus_per_node=1", "trainer.logger=[csv]", f"trainer.total_training_steps={iterations}",
        "trainer.save_freq=-1", "trainer.test_freq=-1", "trainer.val_before_train=False",
        f"trainer.default_local_dir={run}", *extra,
    ]


# ------------------------------------------- a tool and a reward on an environment that fails on purpose

COUNTING_ENV = "tests.envs.fault_envs:CountingEnv"


@dataclasses.dataclass(frozen=True)
class CountingSettings(EnvSettings):
    """:class:`tests.envs.fault_envs.CountingEnv` takes no arguments; short deadlines."""

    start_timeout: float = 60.0
    reset_timeout: float = 20.0
    step_timeout: float = 2.0

    def env_kwargs(self) -> dict:
        return {}


@env_tool(name="counting_step", environment=COUNTING_ENV, settings=CountingSettings, timeout=30.0)
def counting_step(action: str, resource):
    """Play an action: ``hang``, ``nap``, ``crash``, ``raise`` or anything else (one point).

    Args:
        action: the action.
    """
    return act(resource, action)


@reward(name="counting_return", runs_in="thread")
def counting_return(trajectory) -> float:
    """The CountingEnv episode's return."""
    return trajectory.environments[COUNTING_ENV]["return"]
